"""Serve applications of a RayService pass (docs/behaviour.md#6.1 step 12, #6.4 target_capacity): KubeRay's
``reconcileServe`` per cluster and the choice of which clusters to reconcile.

Role: read the cluster's ``obs-serve`` observation, submit ``serveConfigV2`` (YAML→JSON) when KubeRay's
rule says so and record its digest durably on the RayCluster (``raybus.io/serve-config-hash``: the
PutServeConfig's ``record``, which the applier patches only once the dashboard accepted the PUT), and
during an incremental upgrade move the Serve ``target_capacity`` one step (forward, or back during a
rollback).

Time: readiness comes from the cluster's HeadPodReady condition and the prober's observation, both
events; a cluster the prober has not observed yet is simply not ready (nothing polls).

Invariants: pure; a dashboard error ends the pass like KubeRay's error return (no status write); an
invalid ``serveConfigV2`` is a Warning Event and ends the pass.

Not here: reading the observation (``serve_observation``), the durable-record semantics (``serve_config``),
traffic weights (``routing``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final

from schema.decision import OBS_SERVE
from schema.messages import DashboardRef
from schema.probes import snapshot_dashboard
from services.reconciler.rayservice import incremental, names
from services.reconciler.rayservice.cluster_steps import Progress, should_prepare
from services.reconciler.rayservice.clusters import annotations_of, head_ready, name_of
from services.reconciler.rayservice.passes import Pass
from services.reconciler.rayservice.serve_config import (
    ServeConfigError,
    config_hash,
    serve_config_json,
    submit_reason,
)
from services.reconciler.rayservice.serve_observation import read_observation
from services.reconciler.rayservice.status_draft import ACTIVE, PENDING, Role

SUBMIT_CHECK_DELAY: Final = 2.0
"""Seconds after a Serve config submission when the pass looks again (KubeRay requeues every 2 s)."""


def _role_of(pass_: Pass, cluster_name: str) -> Role | None:
    if cluster_name == pass_.status.cluster_name(ACTIVE):
        return ACTIVE
    if cluster_name == pass_.status.cluster_name(PENDING):
        return PENDING
    return None


def _dashboard(pass_: Pass, cluster: Mapping[str, Any]) -> DashboardRef:
    return snapshot_dashboard(pass_.snapshot, cluster_name=name_of(cluster), cluster=cluster)


def reconcile_serve(
    pass_: Pass, cluster: dict[str, Any], *, progress: Progress
) -> tuple[bool, dict[str, dict[str, Any]] | None]:
    """KubeRay's ``reconcileServe`` for one cluster → (ready, application statuses or None)."""
    name = name_of(cluster)
    if not head_ready(pass_.snapshot, cluster, config=pass_.config):
        pass_.rule("6.1/serve-head-not-ready")
        return False, None
    observation = read_observation(pass_.snapshot.get(OBS_SERVE, name))
    if observation is None:
        pass_.rule("6.1/serve-awaiting-observation")
        return False, None
    if observation.error:
        pass_.halt("6.1/serve-dashboard-error")
        return False, None
    assert pass_.model.spec is not None
    serve_config = pass_.model.spec.serve_config_v2
    role = _role_of(pass_, name)
    skip = (role == ACTIVE and pass_.incremental and progress.upgrading) or (role == PENDING and progress.rolling_back)
    recorded = annotations_of(cluster).get(names.ANN_SERVE_CONFIG_HASH, "")
    wanted = config_hash(serve_config)
    why = submit_reason(recorded=recorded, wanted=wanted, observation=observation)
    if why is not None and not skip:
        capacity = pass_.status.int_field(role, "targetCapacity") if (pass_.incremental and role) else None
        try:
            body = serve_config_json(serve_config, target_capacity=capacity)
        except ServeConfigError as exc:
            pass_.emit(
                "Warning",
                reason="FailedToUpdateServeApplications",
                message=f"Failed to update serve applications to the RayCluster {pass_.ref.namespace}/{name}: {exc}",
            )
            pass_.halt("6.1/serve-config-invalid")
            return False, None
        record = (
            pass_.annotation_patch("RayCluster", cluster, {names.ANN_SERVE_CONFIG_HASH: wanted})
            if recorded != wanted
            else None
        )
        pass_.put_serve_config(_dashboard(pass_, cluster), body, record=record)
        # Nothing follows a PUT the dashboard refused (no record, no new observation): look again when
        # KubeRay would (its 2 s requeue); after a successful one, that pass finds nothing to do.
        pass_.wake(pass_.now + timedelta(seconds=SUBMIT_CHECK_DELAY))
        pass_.emit(
            "Normal",
            reason="UpdatedServeApplications",
            message=f"Updated serve applications to the RayCluster {pass_.ref.namespace}/{name}",
        )
        pass_.rule("6.1/serve-submit")
    if pass_.incremental and progress.upgrading and role is not None:
        _step_capacity(pass_, cluster, role=role, progress=progress)
    return observation.ready, observation.applications


def _step_capacity(pass_: Pass, cluster: dict[str, Any], *, role: Role, progress: Progress) -> None:
    """KubeRay's target_capacity step (forward or rollback) for one cluster of an incremental upgrade."""
    options = pass_.model.upgrade_options
    if options is None:
        return
    gateway_ok = incremental.gateway_ready(pass_.snapshot.get("Gateway", names.gateway_name(pass_.model.name)))
    route_ok = incremental.httproute_ready(
        pass_.snapshot.get("HTTPRoute", names.httproute_name(pass_.model.name)),
        gateway=names.gateway_name(pass_.model.name),
    )
    status = pass_.status
    if progress.rolling_back:
        if not (status.cluster_name(ACTIVE) and status.cluster_name(PENDING) and gateway_ok and route_ok):
            return
        goal = incremental.rollback_capacity_goal(status, cluster=name_of(cluster), options=options)
    else:
        if not incremental.needs_capacity_update(status, gateway_ok=gateway_ok, route_ok=route_ok):
            return
        goal = incremental.capacity_goal(status, cluster=name_of(cluster), options=options)
    if goal is None:
        return
    assert pass_.model.spec is not None
    try:
        body = serve_config_json(pass_.model.spec.serve_config_v2, target_capacity=goal)
    except ServeConfigError as exc:
        pass_.emit(
            "Warning",
            reason="FailedToUpdateTargetCapacity",
            message=f"Failed to update target_capacity of serve applications to the RayCluster "
            f"{pass_.ref.namespace}/{name_of(cluster)}: {exc}",
        )
        pass_.halt("6.4/target-capacity-invalid-config")
        return
    pass_.put_serve_config(_dashboard(pass_, cluster), body)
    status.set_field(role, "targetCapacity", value=goal)
    pass_.emit(
        "Normal",
        reason="UpdatedServeTargetCapacity",
        message=f"Updated target_capacity of serve applications to to the RayCluster "
        f"{pass_.ref.namespace}/{name_of(cluster)}",
    )
    pass_.rule("6.4/target-capacity-rollback" if progress.rolling_back else "6.4/target-capacity")


def reconcile_serving(pass_: Pass, progress: Progress) -> None:
    """docs/behaviour.md#6.1 step 12: the pending cluster; the active one when no new cluster is to be prepared;
    both during an incremental upgrade."""
    active, pending = progress.active, progress.pending
    if pending is not None:
        progress.pending_ready, progress.pending_apps = reconcile_serve(pass_, pending, progress=progress)
        if pass_.halted:
            return
    if active is None:
        return
    if (
        pending is None and not should_prepare(pass_, progress, active=active, pending=None, serving_pending=False)
    ) or (pending is not None and pass_.incremental):
        progress.active_ready, progress.active_apps = reconcile_serve(pass_, active, progress=progress)
