"""Gateway objects of an incremental upgrade (docs/behaviour.md#6.4, #6.1 step 13): the per-cluster serve Services,
``<rs>-gateway`` and the weighted ``<rs>-httproute``.

Role: create what is missing, update the Gateway/HTTPRoute when the desired spec is not contained in
the live one (server-side defaults tolerated), and record this pass's weights for the status
(KubeRay reads them back from the route it just wrote).

Invariants: pure; per-cluster Services are owned by their RayCluster (created once the cluster has a
uid), Gateway and HTTPRoute by the RayService; no route until an active cluster exists.

Not here: the weight arithmetic (``incremental``), the RayService Services (``cluster_steps``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schema.objects import mapping, text
from schema.probes import serve_port
from services.reconciler.common.owners import owner_reference_to
from services.reconciler.rayservice import incremental, names
from services.reconciler.rayservice.cluster_steps import Progress
from services.reconciler.rayservice.clusters import name_of
from services.reconciler.rayservice.kube_services import ServiceBuildError, per_cluster_serve_service
from services.reconciler.rayservice.passes import Pass


def reconcile_gateway_objects(pass_: Pass, progress: Progress) -> None:
    """docs/behaviour.md#6.4 / #6.1 step 13: per-cluster serve Services, the Gateway, the weighted HTTPRoute."""
    model, options = pass_.model, pass_.model.upgrade_options
    if options is None:
        return
    for cluster in (progress.active, progress.pending):
        if cluster is None or not text(mapping(cluster.get("metadata")).get("uid")):
            continue
        service_name = names.serve_service_name(name_of(cluster))
        if pass_.snapshot.get("Service", service_name) is not None:
            continue
        try:
            body = per_cluster_serve_service(model, cluster, owner=owner_reference_to(cluster, "RayCluster"))
        except ServiceBuildError as exc:
            pass_.emit(
                "Warning", reason="FailedToCreateService", message=f"{pass_.ref.namespace}/{service_name}: {exc}"
            )
            pass_.halt("6.4/per-cluster-serve-service-failed")
            return
        pass_.create("Service", body)
        pass_.rule("6.4/create-per-cluster-serve-service")
    gateway_name = names.gateway_name(model.name)
    gateway = pass_.snapshot.get("Gateway", gateway_name)
    desired = incremental.gateway_spec(options.gateway_class_name)
    if gateway is None:
        body = incremental.gateway_body(
            rayservice=model.name,
            namespace=model.namespace,
            class_name=options.gateway_class_name,
            owner=pass_.owner_reference(),
        )
        pass_.create("Gateway", body)
        pass_.emit(
            "Normal",
            reason="CreatedGateway",
            message=f"Created Gateway for RayService {model.namespace}/{gateway_name}",
        )
        pass_.rule("6.4/create-gateway")
    elif not _subset(desired, mapping(gateway.get("spec"))):
        pass_.patch("Gateway", gateway, body={"spec": desired}, guarded=False)
        pass_.emit("Normal", reason="UpdatedGateway", message=f"Updated the Gateway {model.namespace}/{gateway_name}")
        pass_.rule("6.4/update-gateway")
    active, pending = progress.active, progress.pending
    if active is None:
        return
    weights = incremental.traffic_weights(
        pass_.status,
        options=options,
        pending_ready=progress.pending_ready,
        rolling_back=progress.rolling_back,
        now=pass_.now,
    )
    backends = [(names.serve_service_name(name_of(active)), serve_port(active), weights[0])]
    if pending is not None:
        backends.append((names.serve_service_name(name_of(pending)), serve_port(pending), weights[1]))
    spec = incremental.httproute_spec(rayservice=model.name, namespace=model.namespace, backends=backends)
    route_name = names.httproute_name(model.name)
    route = pass_.snapshot.get("HTTPRoute", route_name)
    if route is None:
        pass_.create(
            "HTTPRoute",
            incremental.httproute_body(
                rayservice=model.name, namespace=model.namespace, spec=spec, owner=pass_.owner_reference()
            ),
        )
        pass_.emit(
            "Normal",
            reason="CreatedHTTPRoute",
            message=f"Created HTTPRoute for RayService {model.namespace}/{route_name}",
        )
        pass_.rule("6.4/create-httproute")
    elif not _subset(spec, mapping(route.get("spec"))):
        pass_.patch("HTTPRoute", route, body={"spec": spec}, guarded=False)
        pass_.emit("Normal", reason="UpdatedHTTPRoute", message=f"Updated the HTTPRoute {model.namespace}/{route_name}")
        pass_.rule("6.4/update-httproute")
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
