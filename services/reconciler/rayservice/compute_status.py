"""The RayService status computation of a pass (docs/behaviour.md#6.2): cluster statuses, promotion, a new pending
cluster when one is needed, serve endpoints, conditions, serviceStatus, and the wake-ups it implies.

Role: KubeRay's ``calculateStatus`` and ``calculateConditions`` over the status draft, using what the
cluster steps and the Serve step found (:class:`~services.reconciler.rayservice.cluster_steps.Progress`).

Time: the initializing timeout (annotation ``ray.io/initializing-timeout``) is measured from the Ready
condition's lastTransitionTime; the pass asks to be woken at that instant, so the timeout fires
without polling. Incremental traffic steps ask for a wake-up at the next ``intervalSeconds`` boundary.

Invariants: pure; names of new clusters come from ``names.cluster_name`` (uid, generation, the cluster
being replaced); step facts (``activeCluster``, ``pendingCluster``, ``traffic``, ``rollback``) are
recorded on the draft so they ride on the status write.

Not here: the write rule and the PatchStatus (``status_draft``).
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from schema.objects import mapping
from schema.times import format_time, parse_time
from services.reconciler.rayservice import incremental, names
from services.reconciler.rayservice.cluster_steps import Progress, should_prepare
from services.reconciler.rayservice.clusters import name_of, originated_clusters
from services.reconciler.rayservice.godur import go_duration_string, to_nanoseconds
from services.reconciler.rayservice.kube_services import count_serve_endpoints, serve_service_name
from services.reconciler.rayservice.model import initializing_timeout_ns
from services.reconciler.rayservice.passes import Pass
from services.reconciler.rayservice.status_draft import (
    ACTIVE,
    PENDING,
    READY,
    ROLLBACK_IN_PROGRESS,
    UPGRADE_IN_PROGRESS,
)


def _set(pass_: Pass, type_: str, *, status: str, reason: str, message: str) -> None:
    pass_.status.set_condition(
        type_, status=status, reason=reason, message=message, now=pass_.now, observed_generation=pass_.model.generation
    )


def _traffic_from_weights(pass_: Pass, progress: Progress) -> None:
    """Incremental: the traffic percentages from the HTTPRoute weights decided this pass."""
    if progress.weights is None:
        return
    status = pass_.status
    active_weight, pending_weight = progress.weights
    old_pending = status.int_field(PENDING, "trafficRoutedPercent")
    old_active = status.int_field(ACTIVE, "trafficRoutedPercent")
    if active_weight >= 0 and status.cluster_name(ACTIVE):
        status.set_field(ACTIVE, "trafficRoutedPercent", value=active_weight)
        if active_weight != (-1 if old_active is None else old_active):
            status.set_field(ACTIVE, "lastTrafficMigratedTime", value=format_time(pass_.now))
    pending_weight = pending_weight if status.cluster_name(PENDING) else -1
    if pending_weight >= 0:
        status.set_field(PENDING, "trafficRoutedPercent", value=pending_weight)
        if pending_weight != (-1 if old_pending is None else old_pending):
            status.set_field(PENDING, "lastTrafficMigratedTime", value=format_time(pass_.now))
    if pending_weight >= 0 and old_pending is not None and old_pending != pending_weight:
        active_name, pending_name = status.cluster_name(ACTIVE), status.cluster_name(PENDING)
        forward = pending_weight > old_pending
        source, dest = (active_name, pending_name) if forward else (pending_name, active_name)
        from_percent = old_pending if forward else 100 - old_pending
        to_percent = pending_weight if forward else 100 - pending_weight
        status.step(
            "traffic",
            from_value=str(from_percent),
            to_value=str(to_percent),
            reason="RollbackStep" if progress.rolling_back else "IncrementalStep",
            message=f"{to_percent}% of the traffic goes to RayCluster {dest}",
            attributes={"from": source, "to": dest, "fromPercent": str(from_percent), "toPercent": str(to_percent)},
        )


def _promote(pass_: Pass, progress: Progress) -> bool:
    """``reconcilePromotionAndServingStatus``: promote pending → active when its time has come.

    Returns:
        True when the Services point at the pending cluster (as named before any promotion).
    """
    status = pass_.status
    points_to = progress.services_target
    active_name, pending_name = status.cluster_name(ACTIVE), status.cluster_name(PENDING)
    if points_to not in (active_name, pending_name):
        # KubeRay panics here; it cannot happen when the services follow the active/pending cluster.
        pass_.rule("6.2/services-point-elsewhere")
        return False
    promote = False
    if pass_.incremental:
        if status.is_true(UPGRADE_IN_PROGRESS):
            promote = (
                progress.pending is not None and not progress.rolling_back and incremental.upgrade_complete(status)
            )
        elif not active_name and pending_name:
            promote = True
    else:
        promote = active_name != points_to
    if promote:
        status.set_cluster(ACTIVE, copy.deepcopy(status.cluster(PENDING)))
        status.set_cluster(PENDING, {})
        status.step(
            "activeCluster",
            from_value=active_name,
            to_value=pending_name,
            reason="PendingClusterPromoted",
            message=f"RayCluster {pending_name} is now the active cluster",
            attributes={"from": active_name, "to": pending_name},
        )
        pass_.rule("6.2/promote")
    return points_to == pending_name


def _prepare_new_cluster(pass_: Pass) -> None:
    status, model = pass_.status, pass_.model
    old_pending, active_name = status.cluster_name(PENDING), status.cluster_name(ACTIVE)
    taken = frozenset(name_of(c) for c in originated_clusters(pass_.snapshot, model.name)) | {old_pending, active_name}
    new_name = names.cluster_name(
        rayservice=model.name, uid=model.uid, generation=model.generation, replaces=active_name, taken=taken
    )
    pending: dict[str, Any] = {"rayClusterName": new_name}
    if pass_.incremental:
        if not active_name:
            if status.int_field(ACTIVE, "targetCapacity") is None:
                pending["targetCapacity"] = 100
        elif status.is_true(UPGRADE_IN_PROGRESS):
            pending["targetCapacity"] = 0
    status.set_cluster(PENDING, pending)
    status.step(
        "pendingCluster",
        from_value=old_pending,
        to_value=new_name,
        reason="NewClusterPrepared",
        message="pending cluster created",
        attributes={"activeCluster": active_name},
    )
    pass_.rule("6.2/prepare-new-cluster")


def _finish_rollback(pass_: Pass, progress: Progress) -> None:
    status = pass_.status
    if not progress.rolling_back or not status.cluster_name(PENDING):
        return
    if not incremental.rollback_complete(status, pending_ready=progress.pending_ready):
        return
    pending_name, active_name = status.cluster_name(PENDING), status.cluster_name(ACTIVE)
    status.set_cluster(PENDING, {})
    status.remove_condition(ROLLBACK_IN_PROGRESS)
    status.step(
        "rollback",
        from_value="InProgress",
        to_value="Complete",
        reason="RollbackComplete",
        message=f"traffic is back on RayCluster {active_name}",
        attributes={"from": pending_name, "to": active_name},
    )
    progress.rolling_back = False
    progress.pending = None  # released: it is dangling now, and no longer what a new cluster is compared with
    pass_.rule("6.4/rollback-complete")


def _serve_endpoint_services(pass_: Pass, progress: Progress) -> set[str]:
    base = serve_service_name(pass_.model)
    if pass_.incremental and progress.active is not None:
        base = names.serve_service_name(name_of(progress.active))
    found = {base}
    if pass_.incremental and progress.pending is not None:
        found.add(names.serve_service_name(name_of(progress.pending)))
    return found


def _initializing_timeout(pass_: Pass) -> None:
    """Ready False/Initializing for longer than the annotation's timeout → terminal InitializingTimeout."""
    timeout = initializing_timeout_ns(pass_.model)
    ready = pass_.status.condition(READY)
    if timeout is None or ready is None or ready.get("status") != "False" or ready.get("reason") != "Initializing":
        return
    since = parse_time(ready.get("lastTransitionTime"))
    if since is None:
        return
    deadline = since + timedelta(microseconds=timeout // 1000)
    if pass_.now < deadline:
        pass_.wake(deadline)
        return
    spent = go_duration_string(to_nanoseconds(pass_.now - since))
    configured = go_duration_string(timeout)
    status = pass_.status
    for role, field in ((ACTIVE, "activeCluster"), (PENDING, "pendingCluster")):
        name = status.cluster_name(role)
        if name:
            status.set_field(role, "rayClusterName", value=None)
            status.step(field, from_value=name, to_value="", reason="InitializingTimeout", message="cluster released")
    _set(
        pass_,
        READY,
        status="False",
        reason="InitializingTimeout",
        message=f"RayService failed to become ready within the configured timeout of {configured}. "
        f"Time spent initializing: {spent}",
    )
    pass_.emit(
        "Warning",
        reason="RayServiceInitializingTimeout",
        message=f"RayService initializing timeout exceeded after {spent} (configured timeout: {configured})",
    )
    pass_.rule("6.2/initializing-timeout")


def _conditions(pass_: Pass) -> None:
    status = pass_.status
    if not status.conditions:
        message = "RayService is initializing"
        _set(pass_, READY, status="False", reason="Initializing", message=message)
        _set(pass_, UPGRADE_IN_PROGRESS, status="False", reason="Initializing", message=message)
    endpoints = status.get("numServeEndpoints") or 0
    if endpoints > 0:
        _set(
            pass_,
            READY,
            status="True",
            reason="NonZeroServeEndpoints",
            message="Number of serve endpoints is greater than 0",
        )
    elif status.is_true(READY):
        _set(
            pass_, READY, status="False", reason="ZeroServeEndpoints", message="Number of serve endpoints dropped to 0"
        )
    else:
        _initializing_timeout(pass_)
    active_name, pending_name = status.cluster_name(ACTIVE), status.cluster_name(PENDING)
    if active_name and pending_name:
        _set(
            pass_,
            UPGRADE_IN_PROGRESS,
            status="True",
            reason="BothActivePendingClustersExist",
            message="Both active and pending Ray clusters exist",
        )
    elif active_name:
        _set(
            pass_,
            UPGRADE_IN_PROGRESS,
            status="False",
            reason="NoPendingCluster",
            message="Active Ray cluster exists and no pending Ray cluster",
        )
    elif (
        status.reason(UPGRADE_IN_PROGRESS) not in ("Initializing", "InitializingTimeout")
        or status.condition(UPGRADE_IN_PROGRESS) is None
    ):
        _set(
            pass_,
            UPGRADE_IN_PROGRESS,
            status="Unknown",
            reason="NoActiveCluster",
            message=(
                "No active Ray cluster exists, and the RayService is not initializing. Please open a GitHub issue "
                "in the KubeRay repository."
            ),
        )


def compute_status(pass_: Pass, progress: Progress) -> None:
    """docs/behaviour.md#6.2, in KubeRay's order."""
    status = pass_.status
    status.set("observedGeneration", pass_.model.generation)
    for role, cluster, apps in (
        (ACTIVE, progress.active, progress.active_apps),
        (PENDING, progress.pending, progress.pending_apps),
    ):
        status.set_field(role, "rayClusterStatus", value=copy.deepcopy(dict(mapping(mapping(cluster).get("status")))))
        status.set_field(role, "applicationStatuses", value=copy.deepcopy(apps) if apps is not None else None)
    _finish_rollback(pass_, progress)
    serving_pending = False
    if progress.services_target:
        if pass_.incremental:
            _traffic_from_weights(pass_, progress)
        serving_pending = _promote(pass_, progress)
    if should_prepare(
        pass_, progress, active=progress.active, pending=progress.pending, serving_pending=serving_pending
    ):
        _prepare_new_cluster(pass_)
    endpoint_slices = pass_.snapshot.of_kind("EndpointSlice")
    status.set("numServeEndpoints", count_serve_endpoints(endpoint_slices, _serve_endpoint_services(pass_, progress)))
    _conditions(pass_)
    status.set("serviceStatus", "Running" if status.is_true(READY) else "")
    if pass_.incremental and pass_.model.upgrade_options is not None:
        pass_.wake(
            incremental.next_traffic_step(
                status,
                options=pass_.model.upgrade_options,
                pending_ready=progress.pending_ready,
                rolling_back=progress.rolling_back,
            )
        )
