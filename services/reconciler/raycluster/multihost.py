"""The multi-host path of reconcilePods (docs/behaviour.md#4.2 step 6; numOfHosts > 1, gate RayMultiHostIndexing).

Role: manage a group as atomic replicas of ``numOfHosts`` pods: an incomplete or unhealthy replica, or
one with a pod named in ``workersToDelete``, is deleted whole; new replicas get a name ``<g>-<suffix>``
(suffix derived from the cluster UID and the lowest free slot), the lowest free replica index and host
indices 0..n-1.

Invariants: as in ``reconcile_pods``: deterministic names, UID-preconditioned deletes never re-issued for
terminating pods, terminating replicas first in the scale-down order; a replica whose condemned pods
are all terminating makes the group wait (KubeRay's open delete expectation).

Not here: single-host groups (``reconcile_pods``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

from schema.config import OperatorConfig
from schema.ray import WorkerGroupSpec, conventions
from schema.times import parse_time
from services.reconciler.raycluster import events, model, names, pod_bodies
from services.reconciler.raycluster.commands import Plan
from services.reconciler.raycluster.model import ClusterView
from services.reconciler.raycluster.pod_census import PodInfo, should_delete
from services.reconciler.raycluster.pod_scaling import delete_pod, free_indices

CREATE_GRACE: Final = 30.0
"""Seconds a partly visible replica of ours is completed rather than deleted (KubeRay's expectation timeout)."""


def _replicas(listed: list[PodInfo]) -> dict[str, list[PodInfo]]:
    replicas: dict[str, list[PodInfo]] = {}
    for pod in listed:
        replicas.setdefault(pod.replica_name, []).append(pod)
    return {name: replicas[name] for name in sorted(replicas)}


def _delete_replicas(plan: Plan, replicas: dict[str, list[PodInfo]], chosen: list[str], *, why: str) -> int:
    issued = 0
    for replica in chosen:
        for pod in replicas[replica]:
            if delete_pod(plan, pod, head=False, why=why):
                issued += 1
    return issued


def plan_multihost_group(
    view: ClusterView,
    config: OperatorConfig,
    group: WorkerGroupSpec,
    *,
    listed: list[PodInfo],
    desired: int,
    plan: Plan,
    now: datetime,
) -> bool:
    """One multi-host group. Returns False when the pass ends here (a KubeRay error)."""
    g = group.group_name
    hosts = group.num_of_hosts
    replicas = _replicas(listed)
    if _complete_young_replicas(view, config, group, replicas=replicas, now=now, plan=plan):
        return True
    checks: list[tuple[list[str], str, str]] = [
        ([r for r, ps in replicas.items() if len(ps) < hosts], "its replica group is incomplete", "incomplete"),
        (
            [r for r, ps in replicas.items() if any(should_delete(p) for p in ps)],
            "its replica group is unhealthy",
            "unhealthy",
        ),
    ]
    wanted_gone = set(group.scale_strategy.workers_to_delete or ()) if group.scale_strategy else set()
    checks.append(
        (
            [r for r, ps in replicas.items() if any(p.name in wanted_gone for p in ps)],
            "listed in workersToDelete",
            "workers-to-delete",
        )
    )
    for chosen, why, label in checks:
        if not chosen:
            continue
        issued = _delete_replicas(plan, replicas, chosen, why=why)
        if issued:
            plan.fail(f"Deleted {len(chosen)} replica groups of worker group {g} ({why})", f"4.2/multihost-{label}:{g}")
            return False
        plan.rule(f"4.3/multihost-{label}-terminating:{g}")
        return True
    if desired % hosts != 0:
        plan.fail(
            f"desired Pods {desired} of worker group {g} is not a multiple of numOfHosts {hosts}",
            f"4.2/multihost-bad-desired:{g}",
        )
        return False
    diff = desired // hosts - len(replicas)
    if diff > 0:
        _create_replicas(view, config, group, replicas=replicas, listed=listed, count=diff, plan=plan)
    elif diff < 0:
        if not model.autoscaling_enabled(view.spec) or config.switches.enable_random_pod_delete:
            order = sorted(replicas, key=lambda r: (not all(p.terminating for p in replicas[r]), r))
            _delete_replicas(plan, replicas, order[:-diff], why="scale down")
            plan.rule(f"4.2/multihost-scale-down:{g}{diff}")
        else:
            plan.rule(f"4.2/autoscaler-owns-scale-down:{g}")
    return True


def _complete_young_replicas(
    view: ClusterView,
    config: OperatorConfig,
    group: WorkerGroupSpec,
    *,
    replicas: dict[str, list[PodInfo]],
    now: datetime,
    plan: Plan,
) -> bool:
    """Re-issue the missing pods of replicas we created less than 30 s ago. Returns True if any.

    A snapshot can show part of a replica whose pods were all created by one decision (their watch
    events arrive one by one). KubeRay's create expectation (30 s) hides that; here the missing hosts of
    one of *our* replicas (every present pod has the name we derive for its host) are simply created
    again under the same names, instead of deleting the replica as incomplete.
    """
    hosts = group.num_of_hosts
    g = group.group_name
    base: dict[str, Any] | None = None
    found = False
    for replica, present in replicas.items():
        if len(present) >= hosts or not replica:
            continue
        expected = [names.multihost_pod_name(view.name, view.uid, g, replica, h) for h in range(hosts)]
        if any(p.name not in expected for p in present) or not all(
            _younger_than(p, now, CREATE_GRACE) for p in present
        ):
            continue
        found = True
        have = {p.name for p in present}
        index = present[0].replica_index
        for host, name in enumerate(expected):
            if name in have:
                continue
            if base is None:
                base = pod_bodies.worker_pod_base(view, group, config)
            labels = {
                conventions.LABEL_REPLICA_INDEX: index,
                conventions.LABEL_REPLICA_NAME: replica,
                conventions.LABEL_HOST_INDEX: str(host),
            }
            plan.create("Pod", pod_bodies.with_identity(base, name=name, extra_labels=labels))
        plan.rule(f"4.3/multihost-replica-being-created:{replica}")
    return found


def _younger_than(pod: PodInfo, now: datetime, seconds: float) -> bool:
    created = parse_time(str((pod.obj.get("metadata") or {}).get("creationTimestamp") or ""))
    return created is not None and now < created + timedelta(seconds=seconds)


def _create_replicas(
    view: ClusterView,
    config: OperatorConfig,
    group: WorkerGroupSpec,
    *,
    replicas: dict[str, list[PodInfo]],
    listed: list[PodInfo],
    count: int,
    plan: Plan,
) -> None:
    g = group.group_name
    base = pod_bodies.worker_pod_base(view, group, config)
    used_pod_names = {p.name for p in listed}
    used_replicas = set(replicas)
    free = free_indices({int(ps[0].replica_index) for ps in replicas.values() if ps[0].replica_index.isdigit()})
    slot = 0
    for _ in range(count):
        while True:
            replica = names.replica_group_name(view.uid, g, slot)
            pod_names = [
                names.multihost_pod_name(view.name, view.uid, g, replica, h) for h in range(group.num_of_hosts)
            ]
            slot += 1
            if replica not in used_replicas and not any(n in used_pod_names for n in pod_names):
                break
        used_replicas.add(replica)
        used_pod_names.update(pod_names)
        index = next(free)
        for host, name in enumerate(pod_names):
            labels = {
                conventions.LABEL_REPLICA_INDEX: str(index),
                conventions.LABEL_REPLICA_NAME: replica,
                conventions.LABEL_HOST_INDEX: str(host),
            }
            plan.create("Pod", pod_bodies.with_identity(base, name=name, extra_labels=labels))
            events.created_worker_pod(plan, name)
    plan.rule(f"4.2/multihost-scale-up:{g}+{count}")
