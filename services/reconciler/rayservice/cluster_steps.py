"""The cluster side of a RayService pass (docs/behaviour.md#6.1 steps 9, 10, 11, 14): create or update the clusters,
decide a rollback, drive the head pods' serve labels, and point the Services at the serving cluster;
plus ``shouldPrepareNewCluster``.

Role: each step reads the snapshot and the status draft, appends commands to the :class:`Pass`, and
records what the status computation needs in a :class:`Progress`.

Time: nothing here polls. A cluster's readiness comes from its status (HeadPodReady) and from the
prober's ``obs-serve`` observation; the head's ``ray.io/serve`` label from ``obs-servehealth``;
endpoints from EndpointSlices; Gateway/HTTPRoute readiness from their status: each is an event.

Invariants: pure; a step that KubeRay would abandon with an error halts the pass (no status write).

Not here: Serve applications (``reconcile_serve``), Gateway objects (``routing``), cleanup, suspend, the
status computation (``compute_status``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schema.decision import OBS_SERVE_HEALTH
from schema.objects import mapping, text
from schema.ray import conventions
from services.reconciler.rayservice.clusters import (
    build_cluster,
    hash_equal,
    head_pod,
    in_place_update,
    labels_of,
    name_of,
    should_update,
)
from services.reconciler.rayservice.kube_services import (
    ServiceBuildError,
    rayservice_head_service,
    rayservice_serve_service,
    selected_cluster,
    serve_service_name,
    switch_patch,
)
from services.reconciler.rayservice.model import zero_downtime_enabled
from services.reconciler.rayservice.passes import Pass
from services.reconciler.rayservice.status_draft import ACTIVE, PENDING, ROLLBACK_IN_PROGRESS, UPGRADE_IN_PROGRESS


class Progress:
    """What the cluster steps and the Serve step found, for the status computation."""

    def __init__(self) -> None:
        self.active: dict[str, Any] | None = None
        self.pending: dict[str, Any] | None = None
        self.upgrading = False
        self.rolling_back = False
        self.active_ready = False
        self.pending_ready = False
        self.active_apps: dict[str, dict[str, Any]] | None = None
        self.pending_apps: dict[str, dict[str, Any]] | None = None
        self.services_target = ""
        self.weights: tuple[int, int] | None = None


def _with_update(cluster: Mapping[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The cluster as it will be after an in-place update (spec, labels, annotations replaced)."""
    updated = dict(cluster)
    metadata = dict(mapping(cluster.get("metadata")))
    for op in ops:
        if op["path"] == "/spec":
            updated["spec"] = op["value"]
        elif op["path"] == "/metadata/labels":
            metadata["labels"] = op["value"]
        elif op["path"] == "/metadata/annotations":
            metadata["annotations"] = op["value"]
    updated["metadata"] = metadata
    return updated


def reconcile_clusters(pass_: Pass, progress: Progress, *, clusters: list[dict[str, Any]]) -> None:
    """docs/behaviour.md#6.1 step 9: create the missing pending cluster, or update the active/pending one in place."""
    status, model = pass_.status, pass_.model
    by_name = {name_of(c): c for c in clusters}
    active_name, pending_name = status.cluster_name(ACTIVE), status.cluster_name(PENDING)
    progress.active = by_name.get(active_name) if active_name else None
    progress.pending = by_name.get(pending_name) if pending_name else None
    progress.upgrading = status.is_true(UPGRADE_IN_PROGRESS)
    progress.rolling_back = status.is_true(ROLLBACK_IN_PROGRESS)
    clear_replicas = pass_.incremental and bool(active_name)
    rayservice = pass_.snapshot.owner() or {}
    if pending_name and progress.pending is None:
        body = build_cluster(model, rayservice, name=pending_name, clear_replicas=clear_replicas, config=pass_.config)
        pass_.create("RayCluster", body)
        pass_.emit(
            "Normal", reason="CreatedRayCluster", message=f"Created the RayCluster {pass_.ref.namespace}/{pending_name}"
        )
        pass_.rule("6.1/create-pending-cluster")
        progress.pending = body
        return
    for role, cluster in ((ACTIVE, progress.active), (PENDING, progress.pending)):
        if not should_update(model, cluster, active=role == ACTIVE, upgrading=progress.upgrading, config=pass_.config):
            continue
        assert cluster is not None
        ops = in_place_update(model, rayservice, cluster=cluster, clear_replicas=clear_replicas, config=pass_.config)
        pass_.patch("RayCluster", cluster, body=ops, patch_type="json")
        which = "active" if role == ACTIVE else "pending"
        pass_.emit(
            "Normal",
            reason="UpdatedRayCluster",
            message=f"Updated the {which} RayCluster {pass_.ref.namespace}/{name_of(cluster)}",
        )
        pass_.rule(f"6.1/update-{which}-cluster-in-place")
        if role == ACTIVE:
            progress.active = _with_update(cluster, ops)
        else:
            progress.pending = _with_update(cluster, ops)
        return


def decide_rollback(pass_: Pass, progress: Progress) -> None:
    """docs/behaviour.md#6.4 rollback decision: during an incremental upgrade, a goal spec other than the pending
    cluster's starts a rollback; the goal going back to the pending cluster's spec cancels it."""
    if not (pass_.incremental and progress.upgrading and progress.active is not None and progress.pending is not None):
        return
    status = pass_.status
    attributes = {"from": name_of(progress.pending), "to": name_of(progress.active)}
    if hash_equal(pass_.model, progress.pending, partial=False):
        if progress.rolling_back:
            status.remove_condition(ROLLBACK_IN_PROGRESS)
            status.step(
                "rollback",
                from_value="InProgress",
                to_value="Cancelled",
                reason="DesiredClusterSpecChanged",
                message="the goal spec is the pending cluster's again: the upgrade resumes",
                attributes=attributes,
            )
            progress.rolling_back = False
            pass_.rule("6.4/rollback-cancelled")
        return
    if not progress.rolling_back:
        status.set_condition(
            ROLLBACK_IN_PROGRESS,
            status="True",
            reason="DesiredClusterSpecChanged",
            message="The goal RayCluster spec no longer matches the pending cluster: traffic and capacity move back "
            "to the active cluster",
            now=pass_.now,
            observed_generation=pass_.model.generation,
        )
        status.step(
            "rollback",
            from_value="",
            to_value="InProgress",
            reason="DesiredClusterSpecChanged",
            message="rolling back to the active cluster",
            attributes=attributes,
        )
        progress.rolling_back = True
        pass_.rule("6.4/rollback-start")


def _observed_health(pass_: Pass, pod: Mapping[str, Any]) -> str | None:
    data = pass_.snapshot.get(OBS_SERVE_HEALTH, name_of(pod))
    if data is None:
        return None
    observed_uid = text(data.get("pod_uid"))
    if observed_uid and observed_uid != text(mapping(pod.get("metadata")).get("uid")):
        return None  # about an earlier pod of the same (deterministic) name
    return "true" if data.get("healthy") is True else "false"


def update_serve_labels(pass_: Pass, progress: Progress) -> None:
    """docs/behaviour.md#6.1 step 11: the head pod's ``ray.io/serve`` label from the proxy health observation
    (always "false" with excludeHeadPodFromServeSvc); patched only when the value changes."""
    assert pass_.model.spec is not None
    exclude = pass_.model.spec.exclude_head_pod_from_serve_svc
    for cluster in (progress.active, progress.pending):
        if cluster is None:
            continue
        pod = head_pod(pass_.snapshot, name_of(cluster))
        if pod is None:
            # KubeRay returns an error here; raybus goes on (the cluster is simply not ready), so the
            # status computation and its initializing timeout still run.
            pass_.rule("6.1/head-pod-missing")
            continue
        wanted = "false" if exclude else _observed_health(pass_, pod)
        if wanted is None or labels_of(pod).get(conventions.LABEL_SERVE) == wanted:
            continue
        pass_.patch("Pod", pod, body={"metadata": {"labels": {conventions.LABEL_SERVE: wanted}}}, guarded=False)
        pass_.emit(
            "Normal",
            reason="UpdatedHeadPodServeLabel",
            message=f'Updated the serve label to "{wanted}" for the Head Pod {pass_.ref.namespace}/{name_of(pod)}',
        )
        pass_.rule("6.1/head-serve-label")


def should_prepare(pass_: Pass, progress: Progress, *, active: Any, pending: Any, serving_pending: bool) -> bool:
    """KubeRay's ``shouldPrepareNewCluster`` (docs/behaviour.md#6.2 step 3; no new cluster during a rollback)."""
    if serving_pending or progress.rolling_back:
        return False
    if active is None and pending is None:
        return True
    cluster = pending if pending is not None else active
    if hash_equal(pass_.model, cluster, partial=False) or hash_equal(pass_.model, cluster, partial=True):
        return False
    return zero_downtime_enabled(pass_.model, pass_.config)


def _reconcile_service(pass_: Pass, desired: dict[str, Any], *, target: str, traffic: bool) -> None:
    name = text(mapping(desired.get("metadata")).get("name"))
    existing = pass_.snapshot.get("Service", name)
    if existing is None:
        pass_.create("Service", desired)
        pass_.emit("Normal", reason="CreatedService", message=f"Created the service {pass_.ref.namespace}/{name}")
        pass_.rule("6.1/create-service")
        previous = ""
    else:
        previous = selected_cluster(existing)
        if previous == target:
            return
        pass_.patch("Service", existing, body=switch_patch(existing, desired), patch_type="json")
        pass_.emit("Normal", reason="UpdatedService", message=f"Updated the service {pass_.ref.namespace}/{name}")
        pass_.rule("6.1/switch-service")
    if traffic:
        pass_.status.step(
            "traffic",
            from_value=previous,
            to_value=target,
            reason="ServiceSelectorSwitched",
            message=f"Service {name} now selects RayCluster {target}",
            attributes={"from": previous, "to": target, "service": name},
        )


def reconcile_services(pass_: Pass, progress: Progress) -> None:
    """docs/behaviour.md#6.1 step 14: point ``<rs>-head-svc`` and the serve Service at the target cluster."""
    if not (progress.pending_ready or progress.active_ready):
        return
    target = progress.active
    if progress.pending_ready and not (pass_.incremental and progress.upgrading):
        target = progress.pending
    if target is None:
        return
    target_name = name_of(target)
    try:
        head = rayservice_head_service(pass_.model, target, owner=pass_.owner_reference(), config=pass_.config)
        serve = (
            None if pass_.incremental else rayservice_serve_service(pass_.model, target, owner=pass_.owner_reference())
        )
    except ServiceBuildError as exc:
        pass_.emit(
            "Warning",
            reason="FailedToCreateService",
            message=f"{pass_.ref.namespace}/{serve_service_name(pass_.model)}: {exc}",
        )
        pass_.halt("6.1/service-build-failed")
        return
    _reconcile_service(pass_, head, target=target_name, traffic=False)
    if serve is not None:
        _reconcile_service(pass_, serve, target=target_name, traffic=True)
    progress.services_target = target_name
