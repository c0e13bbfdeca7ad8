"""The serving flow of a RayService pass (SPEC §6.1 steps 9-14): clusters, rollback decision, head-pod
serve labels, Serve applications, incremental-upgrade objects, and the Services that follow the
serving cluster.

Role: each step reads the snapshot and the status draft, appends commands to the :class:`Pass`, and
records what the status computation needs in a :class:`Progress`.

Time: nothing here polls. A cluster's readiness comes from its status (HeadPodReady) and from the
prober's ``obs-serve`` observation; the head's ``ray.io/serve`` label from ``obs-servehealth``;
endpoints from EndpointSlices; Gateway/HTTPRoute readiness from their status: each is an event.

Invariants: pure; a step that KubeRay would abandon with an error halts the pass (no status write).

Not here: cleanup, suspend, the status computation (``outcome``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schema.decision import OBS_SERVE, OBS_SERVE_HEALTH
from services.reconciler.rayjob.cluster import dashboard_ref, owner_reference
from services.reconciler.rayservice import incremental, names
from services.reconciler.rayservice.clusters import (
    annotations_of,
    build_cluster,
    hash_equal,
    head_pod,
    head_ready,
    in_place_update,
    labels_of,
    name_of,
    serve_port,
    should_update,
)
from services.reconciler.rayservice.model import mapping, text, zero_downtime_enabled
from services.reconciler.rayservice.passes import Pass
from services.reconciler.rayservice.serve import (
    ServeConfigError,
    config_hash,
    read_observation,
    serve_config_json,
    submit_reason,
)
from services.reconciler.rayservice.services import (
    ServiceBuildError,
    per_cluster_serve_service,
    rayservice_head_service,
    rayservice_serve_service,
    selected_cluster,
    serve_service_name,
    switch_patch,
)
from services.reconciler.rayservice.status import ACTIVE, PENDING, ROLLBACK_IN_PROGRESS, UPGRADE_IN_PROGRESS, Role


class Progress:
    """What the serving flow found, for the status computation."""

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


def reconcile_clusters(job: Pass, clusters: list[dict[str, Any]], progress: Progress) -> None:
    """SPEC §6.1 step 9: create the missing pending cluster, or update the active/pending one in place."""
    status, model = job.status, job.model
    by_name = {name_of(c): c for c in clusters}
    active_name, pending_name = status.cluster_name(ACTIVE), status.cluster_name(PENDING)
    progress.active = by_name.get(active_name) if active_name else None
    progress.pending = by_name.get(pending_name) if pending_name else None
    progress.upgrading = status.is_true(UPGRADE_IN_PROGRESS)
    progress.rolling_back = status.is_true(ROLLBACK_IN_PROGRESS)
    clear_replicas = job.incremental and bool(active_name)
    rayservice = job.snapshot.owner() or {}
    if pending_name and progress.pending is None:
        body = build_cluster(model, rayservice, name=pending_name, clear_replicas=clear_replicas, config=job.config)
        job.create("RayCluster", body)
        job.emit(
            "Normal", reason="CreatedRayCluster", message=f"Created the RayCluster {job.ref.namespace}/{pending_name}"
        )
        job.rule("6.1/create-pending-cluster")
        progress.pending = body
        return
    for role, cluster in ((ACTIVE, progress.active), (PENDING, progress.pending)):
        if not should_update(model, cluster, active=role == ACTIVE, upgrading=progress.upgrading, config=job.config):
            continue
        assert cluster is not None
        ops = in_place_update(model, rayservice, cluster, clear_replicas=clear_replicas, config=job.config)
        job.patch("RayCluster", cluster, ops, patch_type="json")
        which = "active" if role == ACTIVE else "pending"
        job.emit(
            "Normal",
            reason="UpdatedRayCluster",
            message=f"Updated the {which} RayCluster {job.ref.namespace}/{name_of(cluster)}",
        )
        job.rule(f"6.1/update-{which}-cluster-in-place")
        if role == ACTIVE:
            progress.active = _with_update(cluster, ops)
        else:
            progress.pending = _with_update(cluster, ops)
        return


def decide_rollback(job: Pass, progress: Progress) -> None:
    """SPEC §6.4 rollback decision: during an incremental upgrade, a goal spec other than the pending
    cluster's starts a rollback; the goal going back to the pending cluster's spec cancels it."""
    if not (job.incremental and progress.upgrading and progress.active is not None and progress.pending is not None):
        return
    status = job.status
    attributes = {"from": name_of(progress.pending), "to": name_of(progress.active)}
    if hash_equal(job.model, progress.pending, partial=False):
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
            job.rule("6.4/rollback-cancelled")
        return
    if not progress.rolling_back:
        status.set_condition(
            ROLLBACK_IN_PROGRESS,
            "True",
            "DesiredClusterSpecChanged",
            "The goal RayCluster spec no longer matches the pending cluster: traffic and capacity move back "
            "to the active cluster",
            now=job.now,
            observed_generation=job.model.generation,
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
        job.rule("6.4/rollback-start")


def _observed_health(job: Pass, pod: Mapping[str, Any]) -> str | None:
    data = job.snapshot.get(OBS_SERVE_HEALTH, name_of(pod))
    if data is None:
        return None
    observed_uid = text(data.get("pod_uid"))
    if observed_uid and observed_uid != text(mapping(pod.get("metadata")).get("uid")):
        return None  # about an earlier pod of the same (deterministic) name
    return "true" if data.get("healthy") is True else "false"


def update_serve_labels(job: Pass, progress: Progress) -> None:
    """SPEC §6.1 step 11: the head pod's ``ray.io/serve`` label from the proxy health observation
    (always "false" with excludeHeadPodFromServeSvc); patched only when the value changes."""
    assert job.model.spec is not None
    exclude = job.model.spec.exclude_head_pod_from_serve_svc
    for cluster in (progress.active, progress.pending):
        if cluster is None:
            continue
        pod = head_pod(job.snapshot, name_of(cluster))
        if pod is None:
            # KubeRay returns an error here; raybus goes on (the cluster is simply not ready), so the
            # status computation and its initializing timeout still run.
            job.rule("6.1/head-pod-missing")
            continue
        wanted = "false" if exclude else _observed_health(job, pod)
        if wanted is None or labels_of(pod).get(names.LABEL_SERVE) == wanted:
            continue
        job.patch("Pod", pod, {"metadata": {"labels": {names.LABEL_SERVE: wanted}}}, guarded=False)
        job.emit(
            "Normal",
            reason="UpdatedHeadPodServeLabel",
            message=f'Updated the serve label to "{wanted}" for the Head Pod {job.ref.namespace}/{name_of(pod)}',
        )
        job.rule("6.1/head-serve-label")


def should_prepare(job: Pass, progress: Progress, *, active: Any, pending: Any, serving_pending: bool) -> bool:
    """KubeRay's ``shouldPrepareNewCluster`` (SPEC §6.2 step 3; no new cluster during a rollback)."""
    if serving_pending or progress.rolling_back:
        return False
    if active is None and pending is None:
        return True
    cluster = pending if pending is not None else active
    if hash_equal(job.model, cluster, partial=False) or hash_equal(job.model, cluster, partial=True):
        return False
    return zero_downtime_enabled(job.model, job.config)


def _role_of(job: Pass, cluster_name: str) -> Role | None:
    if cluster_name == job.status.cluster_name(ACTIVE):
        return ACTIVE
    if cluster_name == job.status.cluster_name(PENDING):
        return PENDING
    return None


def _dashboard(job: Pass, cluster: Mapping[str, Any]) -> Any:
    return dashboard_ref(job.snapshot, namespace=job.ref.namespace, cluster_name=name_of(cluster), cluster=cluster)


def reconcile_serve(
    job: Pass, cluster: dict[str, Any], progress: Progress
) -> tuple[bool, dict[str, dict[str, Any]] | None]:
    """KubeRay's ``reconcileServe`` for one cluster → (ready, application statuses or None)."""
    name = name_of(cluster)
    if not head_ready(job.snapshot, cluster, job.config):
        job.rule("6.1/serve-head-not-ready")
        return False, None
    observation = read_observation(job.snapshot.get(OBS_SERVE, name))
    if observation is None:
        job.rule("6.1/serve-awaiting-observation")
        return False, None
    if observation.error:
        job.halt("6.1/serve-dashboard-error")
        return False, None
    assert job.model.spec is not None
    serve_config = job.model.spec.serve_config_v2
    role = _role_of(job, name)
    skip = (role == ACTIVE and job.incremental and progress.upgrading) or (role == PENDING and progress.rolling_back)
    recorded = annotations_of(cluster).get(names.ANN_SERVE_CONFIG_HASH, "")
    wanted = config_hash(serve_config)
    why = submit_reason(recorded=recorded, wanted=wanted, observation=observation)
    if why is not None and not skip:
        capacity = job.status.int_field(role, "targetCapacity") if (job.incremental and role) else None
        try:
            body = serve_config_json(serve_config, target_capacity=capacity)
        except ServeConfigError as exc:
            job.emit(
                "Warning",
                reason="FailedToUpdateServeApplications",
                message=f"Failed to update serve applications to the RayCluster {job.ref.namespace}/{name}: {exc}",
            )
            job.halt("6.1/serve-config-invalid")
            return False, None
        job.put_serve_config(_dashboard(job, cluster), body)
        if recorded != wanted:
            job.patch(
                "RayCluster",
                cluster,
                {"metadata": {"annotations": {names.ANN_SERVE_CONFIG_HASH: wanted}}},
                guarded=False,
            )
        job.emit(
            "Normal",
            reason="UpdatedServeApplications",
            message=f"Updated serve applications to the RayCluster {job.ref.namespace}/{name}",
        )
        job.rule("6.1/serve-submit")
    if job.incremental and progress.upgrading and role is not None:
        _step_capacity(job, cluster, role, progress)
    return observation.ready, observation.applications


def _step_capacity(job: Pass, cluster: dict[str, Any], role: Role, progress: Progress) -> None:
    """KubeRay's target_capacity step (forward or rollback) for one cluster of an incremental upgrade."""
    options = job.model.upgrade_options
    if options is None:
        return
    gateway_ok = incremental.gateway_ready(job.snapshot.get("Gateway", names.gateway_name(job.model.name)))
    route_ok = incremental.httproute_ready(
        job.snapshot.get("HTTPRoute", names.httproute_name(job.model.name)), gateway=names.gateway_name(job.model.name)
    )
    status = job.status
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
    assert job.model.spec is not None
    try:
        body = serve_config_json(job.model.spec.serve_config_v2, target_capacity=goal)
    except ServeConfigError as exc:
        job.emit(
            "Warning",
            reason="FailedToUpdateTargetCapacity",
            message=f"Failed to update target_capacity of serve applications to the RayCluster "
            f"{job.ref.namespace}/{name_of(cluster)}: {exc}",
        )
        job.halt("6.4/target-capacity-invalid-config")
        return
    job.put_serve_config(_dashboard(job, cluster), body)
    status.set_field(role, "targetCapacity", goal)
    job.emit(
        "Normal",
        reason="UpdatedServeTargetCapacity",
        message=f"Updated target_capacity of serve applications to to the RayCluster "
        f"{job.ref.namespace}/{name_of(cluster)}",
    )
    job.rule("6.4/target-capacity-rollback" if progress.rolling_back else "6.4/target-capacity")


def reconcile_serving(job: Pass, progress: Progress) -> None:
    """SPEC §6.1 step 12: the pending cluster; the active one when no new cluster is to be prepared;
    both during an incremental upgrade."""
    active, pending = progress.active, progress.pending
    if pending is not None:
        progress.pending_ready, progress.pending_apps = reconcile_serve(job, pending, progress)
        if job.halted:
            return
    if active is None:
        return
    if (pending is None and not should_prepare(job, progress, active=active, pending=None, serving_pending=False)) or (
        pending is not None and job.incremental
    ):
        progress.active_ready, progress.active_apps = reconcile_serve(job, active, progress)


def _owner(job: Pass) -> dict[str, Any]:
    return owner_reference(job.snapshot.owner() or {}, kind="RayService")


def reconcile_gateway_objects(job: Pass, progress: Progress) -> None:
    """SPEC §6.4 / §6.1 step 13: per-cluster serve Services, the Gateway, the weighted HTTPRoute."""
    model, options = job.model, job.model.upgrade_options
    if options is None:
        return
    for cluster in (progress.active, progress.pending):
        if cluster is None or not text(mapping(cluster.get("metadata")).get("uid")):
            continue
        service_name = names.serve_service_name(name_of(cluster))
        if job.snapshot.get("Service", service_name) is not None:
            continue
        try:
            body = per_cluster_serve_service(model, cluster, owner=owner_reference(cluster, kind="RayCluster"))
        except ServiceBuildError as exc:
            job.emit("Warning", reason="FailedToCreateService", message=f"{job.ref.namespace}/{service_name}: {exc}")
            job.halt("6.4/per-cluster-serve-service-failed")
            return
        job.create("Service", body)
        job.rule("6.4/create-per-cluster-serve-service")
    gateway_name = names.gateway_name(model.name)
    gateway = job.snapshot.get("Gateway", gateway_name)
    desired = incremental.gateway_spec(options.gateway_class_name)
    if gateway is None:
        body = incremental.gateway_body(
            rayservice=model.name, namespace=model.namespace, class_name=options.gateway_class_name, owner=_owner(job)
        )
        job.create("Gateway", body)
        job.emit(
            "Normal",
            reason="CreatedGateway",
            message=f"Created Gateway for RayService {model.namespace}/{gateway_name}",
        )
        job.rule("6.4/create-gateway")
    elif not _subset(desired, mapping(gateway.get("spec"))):
        job.patch("Gateway", gateway, {"spec": desired}, guarded=False)
        job.emit("Normal", reason="UpdatedGateway", message=f"Updated the Gateway {model.namespace}/{gateway_name}")
        job.rule("6.4/update-gateway")
    active, pending = progress.active, progress.pending
    if active is None:
        return
    weights = incremental.traffic_weights(
        job.status,
        options=options,
        pending_ready=progress.pending_ready,
        rolling_back=progress.rolling_back,
        now=job.now,
    )
    backends = [(names.serve_service_name(name_of(active)), serve_port(active), weights[0])]
    if pending is not None:
        backends.append((names.serve_service_name(name_of(pending)), serve_port(pending), weights[1]))
    spec = incremental.httproute_spec(rayservice=model.name, namespace=model.namespace, backends=backends)
    route_name = names.httproute_name(model.name)
    route = job.snapshot.get("HTTPRoute", route_name)
    if route is None:
        job.create(
            "HTTPRoute",
            incremental.httproute_body(rayservice=model.name, namespace=model.namespace, spec=spec, owner=_owner(job)),
        )
        job.emit(
            "Normal",
            reason="CreatedHTTPRoute",
            message=f"Created HTTPRoute for RayService {model.namespace}/{route_name}",
        )
        job.rule("6.4/create-httproute")
    elif not _subset(spec, mapping(route.get("spec"))):
        job.patch("HTTPRoute", route, {"spec": spec}, guarded=False)
        job.emit("Normal", reason="UpdatedHTTPRoute", message=f"Updated the HTTPRoute {model.namespace}/{route_name}")
        job.rule("6.4/update-httproute")
    progress.weights = (weights[0], weights[1] if pending is not None else -1)


def _subset(desired: Any, actual: Any) -> bool:
    """``desired`` is contained in ``actual`` (server-side defaults in ``actual`` are tolerated)."""
    if isinstance(desired, Mapping):
        return isinstance(actual, Mapping) and all(k in actual and _subset(v, actual[k]) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            isinstance(actual, list)
            and len(desired) == len(actual)
            and all(_subset(d, a) for d, a in zip(desired, actual, strict=True))
        )
    return bool(desired == actual)


def _reconcile_service(job: Pass, desired: dict[str, Any], target: str, *, traffic: bool) -> None:
    name = text(mapping(desired.get("metadata")).get("name"))
    existing = job.snapshot.get("Service", name)
    if existing is None:
        job.create("Service", desired)
        job.emit("Normal", reason="CreatedService", message=f"Created the service {job.ref.namespace}/{name}")
        job.rule("6.1/create-service")
        previous = ""
    else:
        previous = selected_cluster(existing)
        if previous == target:
            return
        job.patch("Service", existing, switch_patch(existing, desired), patch_type="json")
        job.emit("Normal", reason="UpdatedService", message=f"Updated the service {job.ref.namespace}/{name}")
        job.rule("6.1/switch-service")
    if traffic:
        job.status.step(
            "traffic",
            from_value=previous,
            to_value=target,
            reason="ServiceSelectorSwitched",
            message=f"Service {name} now selects RayCluster {target}",
            attributes={"from": previous, "to": target, "service": name},
        )


def reconcile_services(job: Pass, progress: Progress) -> None:
    """SPEC §6.1 step 14: point ``<rs>-head-svc`` and the serve Service at the target cluster."""
    if not (progress.pending_ready or progress.active_ready):
        return
    target = progress.active
    if progress.pending_ready and not (job.incremental and progress.upgrading):
        target = progress.pending
    if target is None:
        return
    target_name = name_of(target)
    try:
        head = rayservice_head_service(job.model, target, owner=_owner(job), config=job.config)
        serve = None if job.incremental else rayservice_serve_service(job.model, target, owner=_owner(job))
    except ServiceBuildError as exc:
        job.emit(
            "Warning",
            reason="FailedToCreateService",
            message=f"{job.ref.namespace}/{serve_service_name(job.model)}: {exc}",
        )
        job.halt("6.1/service-build-failed")
        return
    _reconcile_service(job, head, target_name, traffic=False)
    if serve is not None:
        _reconcile_service(job, serve, target_name, traffic=True)
    progress.services_target = target_name
