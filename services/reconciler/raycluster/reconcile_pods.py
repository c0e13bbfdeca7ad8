"""reconcilePods (docs/behaviour.md#4.2): suspend, Recreate upgrade, the head pod, and each worker group.

Role: compare the pods in the snapshot with the spec and emit the creates/deletes (plus their Events)
that move one step towards it, exactly in KubeRay's order and with its stopping rules.

Idempotency instead of scale expectations (docs/behaviour.md#4.3): KubeRay skips a group while its own recent
creates/deletes are not yet visible in its cache. raybus keeps no memory between calls, so:
- pods get deterministic names (``names``) and the lowest free slot; a stale snapshot that misses the
  pods of the previous decision re-issues the *same* names, which the applier's AlreadyExists absorbs;
- deletes carry the pod UID as a precondition and are never re-issued for a terminating pod;
- terminating pods still count as running (as in KubeRay) and are the first scale-down candidates, so a
  re-run of a scale-down picks the pods already going away rather than new victims;
- a group whose condemned pods are still terminating is skipped, like KubeRay's open delete expectation.
Scale-down order is "terminating first, then by name" (KubeRay: informer list order, unspecified).

Not here: pod bodies (``pod_bodies``), the pod facts (``pod_census``), status (``status``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from schema.config import OperatorConfig
from schema.ray import WorkerGroupSpec, conventions
from services.reconciler.raycluster import events, model, names, pod_bodies
from services.reconciler.raycluster.commands import Plan
from services.reconciler.raycluster.model import ClusterView, condition_true, desired_pods
from services.reconciler.raycluster.multihost import plan_multihost_group
from services.reconciler.raycluster.pod_census import PodCensus, PodInfo, may_need_deletion, should_delete
from services.reconciler.raycluster.pod_scaling import (
    delete_pod,
    free_indices,
    scale_down_order,
    used_indices,
)


def plan_pods(
    view: ClusterView,
    config: OperatorConfig,
    *,
    census: PodCensus,
    plan: Plan,
    spec_hash: Callable[[], str],
    now: datetime,
) -> None:
    """docs/behaviour.md#4.2; errors are recorded with ``plan.fail`` (and end the pass like KubeRay's return)."""
    gate = config.gates.ray_cluster_status_conditions
    spec = view.spec
    all_pods = names.selector({conventions.LABEL_CLUSTER: view.name})
    if (gate and condition_true(view, "RayClusterSuspending")) or (not gate and spec.suspend):
        if any(not p.terminating for p in census.pods):
            plan.delete_collection("Pod", all_pods)
            events.deleted_all_pods(plan, "due to suspension")
            plan.rule("4.2/suspend-delete-all-pods")
        else:
            plan.rule("4.2/suspend-pods-terminating")
        return
    if gate and condition_true(view, "RayClusterSuspended"):
        plan.rule("4.2/suspended")
        return
    if gate and spec.suspend:
        plan.rule("4.4/suspend-requested")
        return
    recreate = spec.upgrade_strategy is not None and spec.upgrade_strategy.type == "Recreate"
    if (
        recreate
        and census.heads
        and _recreate(view, config, census=census, plan=plan, all_pods=all_pods, spec_hash=spec_hash)
    ):
        return
    if not _plan_head(view, config, census=census, plan=plan, spec_hash=spec_hash):
        return
    for group in spec.worker_group_specs or ():
        if not _plan_group(view, config, group, census=census, plan=plan, now=now):
            return


def _recreate(
    view: ClusterView,
    config: OperatorConfig,
    *,
    census: PodCensus,
    plan: Plan,
    all_pods: str,
    spec_hash: Callable[[], str],
) -> bool:
    """upgradeStrategy Recreate. Returns True when the pass ends here."""
    head = census.heads[0]
    annotations = (head.obj.get("metadata") or {}).get("annotations") or {}
    version = annotations.get(conventions.ANN_KUBERAY_VERSION, "")
    recorded = annotations.get(conventions.ANN_RECREATE_HASH, "")
    current = spec_hash()
    if version and version != config.version:
        plan.patch(
            plan.ref("Pod", head.name, uid=head.uid),
            {
                "metadata": {
                    "annotations": {
                        conventions.ANN_RECREATE_HASH: current,
                        conventions.ANN_KUBERAY_VERSION: config.version,
                    }
                }
            },
        )
        plan.rule("4.2/recreate-operator-upgraded")
        return False
    if recorded and recorded != current:
        if any(not p.terminating for p in census.pods):
            plan.delete_collection("Pod", all_pods)
            events.deleted_all_pods(plan, "because the spec changed (upgradeStrategy Recreate)")
        plan.rule("4.2/recreate-delete-all-pods")
        return True
    return False


def _plan_head(
    view: ClusterView, config: OperatorConfig, *, census: PodCensus, plan: Plan, spec_hash: Callable[[], str]
) -> bool:
    """docs/behaviour.md#4.2 step 4. Returns False when the pass ends here."""
    heads = census.heads
    if len(heads) > 1:
        plan.fail(
            f"{len(heads)} head Pods found for RayCluster {view.namespace}/{view.name}; expected at most one",
            "4.2/multiple-head-pods",
        )
        return False
    if len(heads) == 1:
        head = heads[0]
        if head.terminating:
            plan.rule("4.3/head-pod-terminating")
            return True
        reason = should_delete(head)
        if reason:
            delete_pod(plan, head, head=True, why=reason)
            plan.fail(reason, "4.2/delete-head-pod")
            return False
        return True
    if (
        condition_true(view, "RayClusterProvisioned")
        and view.annotations.get(conventions.ANN_DISABLE_HEAD_RESTART, "") == "true"
    ):
        plan.rule("4.2/head-restart-disabled")
        return False
    name = names.head_pod_name(view.name, view.uid, deterministic=config.switches.enable_deterministic_head_pod_name)
    plan.create("Pod", pod_bodies.head_pod(view, config, name=name, spec_hash=spec_hash()))
    events.created_head_pod(plan, name)
    plan.rule("4.2/create-head-pod")
    return True


def _plan_group(
    view: ClusterView, config: OperatorConfig, group: WorkerGroupSpec, *, census: PodCensus, plan: Plan, now: datetime
) -> bool:
    """docs/behaviour.md#4.2 step 5 for one group. Returns False when the pass ends here."""
    g = group.group_name
    listed = list(census.by_group.get(g, ()))
    desired = desired_pods(group)
    if group.suspend:
        if any(not p.terminating for p in listed):
            plan.delete_collection(
                "Pod",
                names.selector({conventions.LABEL_CLUSTER: view.name, conventions.LABEL_GROUP: g}),
            )
            events.deleted_all_pods(plan, f"of worker group {g} due to suspension")
            plan.rule(f"4.2/suspend-group:{g}")
        return True
    if group.num_of_hosts > 1 and config.gates.ray_multi_host_indexing:
        return plan_multihost_group(view, config, group, listed=listed, desired=desired, plan=plan, now=now)
    condemned = [(p, why) for p in listed if may_need_deletion(p) and (why := should_delete(p))]
    if condemned:
        issued = [p for p, why in condemned if delete_pod(plan, p, head=False, why=why)]
        if issued:
            plan.fail(
                f"Deleted {len(issued)} unhealthy worker Pods of group {g}; new Pods are created in the next pass",
                f"4.2/delete-unhealthy:{g}",
            )
            return False
        plan.rule(f"4.3/unhealthy-terminating:{g}")
        return True
    wanted_gone = set(group.scale_strategy.workers_to_delete or ()) if group.scale_strategy else set()
    victims = [p for p in listed if p.name in wanted_gone]
    for pod in victims:
        delete_pod(plan, pod, head=False, why="listed in scaleStrategy.workersToDelete")
    if victims:
        plan.rule(f"4.2/workers-to-delete:{g}-{len(victims)}")
    running = [p for p in listed if p.name not in wanted_gone]
    diff = desired - len(running)
    if diff > 0:
        _create_workers(view, config, group, listed=listed, running=running, count=diff, plan=plan)
    elif diff < 0:
        if not model.autoscaling_enabled(view.spec) or config.switches.enable_random_pod_delete:
            for pod in scale_down_order(running)[:-diff]:
                delete_pod(plan, pod, head=False, why="scale down")
            plan.rule(f"4.2/scale-down:{g}{diff}")
        else:
            plan.rule(f"4.2/autoscaler-owns-scale-down:{g}")
    return True


def _create_workers(
    view: ClusterView,
    config: OperatorConfig,
    group: WorkerGroupSpec,
    *,
    listed: list[PodInfo],
    running: list[PodInfo],
    count: int,
    plan: Plan,
) -> None:
    g = group.group_name
    base = pod_bodies.worker_pod_base(view, group, config)
    used_names = {p.name for p in listed}
    free = free_indices(used_indices(running))
    slot = 0
    for _ in range(count):
        name = names.worker_pod_name(view.name, view.uid, g, slot)
        while name in used_names:
            slot += 1
            name = names.worker_pod_name(view.name, view.uid, g, slot)
        used_names.add(name)
        slot += 1
        extra: dict[str, str] = {}
        if config.gates.ray_multi_host_indexing:
            extra[conventions.LABEL_REPLICA_INDEX] = str(next(free))
        plan.create("Pod", pod_bodies.with_identity(base, name=name, extra_labels=extra))
        events.created_worker_pod(plan, name)
    plan.rule(f"4.2/scale-up:{g}+{count}")
