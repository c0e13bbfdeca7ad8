"""The Services of a RayService (docs/behaviour.md#6.1 steps 13-14, #6.2 step 4): ``<rs>-head-svc`` and the serve
Service that follow the serving cluster, the per-cluster ``<c>-serve-svc`` of an incremental upgrade,
and the count of ready serve endpoints.

Role: build each body the way KubeRay does, reusing the RayCluster controller's head-Service and
serve-port builders on the target cluster's spec, and decide create / switch / nothing.

Invariants:
- ``<rs>-head-svc`` is the target cluster's head Service renamed and re-labelled for the RayService.
- The serve Service selects ``{ray.io/cluster: <target>, ray.io/serve: "true"}``; its ports are the
  head container's ports named ``serve``/``serve-*`` (a user ``serveService`` port of the same name
  wins, and a user ``serve`` port alone is enough); no such port at all is an error.
- An existing Service is updated only when its selector's ``ray.io/cluster`` differs (the traffic
  cut-over): its spec is replaced, its ClusterIP kept.

Not here: Gateway/HTTPRoute (``incremental``), deciding the target cluster (``reconcile``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from schema.config import OperatorConfig
from schema.objects import mapping, text
from schema.ray import RayClusterSpec, conventions, decode_as
from services.reconciler.raycluster.model import view_of
from services.reconciler.raycluster.services import head_service, serve_ports
from services.reconciler.rayservice import names
from services.reconciler.rayservice.model import ServiceModel

NO_SERVE_PORT = (
    "Please specify the port named 'serve' in the Ray head container; otherwise, the Kubernetes service "
    "for Ray Serve will not be created."
)
NO_SERVE_PORT_ANYWHERE = (
    "Please specify the port named 'serve' in the Ray head container or in RayService.Spec.ServeService"
)


class ServiceBuildError(Exception):
    """A Service cannot be built (no serve port); KubeRay returns the error and requeues."""


def _cluster_spec(cluster: Mapping[str, Any]) -> RayClusterSpec:
    try:
        return decode_as(dict(mapping(cluster.get("spec"))), RayClusterSpec)
    except (msgspec.ValidationError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise ServiceBuildError(f"the RayCluster spec cannot be read: {exc}") from exc


def selected_cluster(service: Mapping[str, Any] | None) -> str:
    """The ``ray.io/cluster`` of a Service's selector ("" when none)."""
    selector = mapping(mapping(mapping(service).get("spec")).get("selector"))
    return text(selector.get(conventions.LABEL_CLUSTER))


def rayservice_head_service(
    model: ServiceModel, cluster: Mapping[str, Any], *, owner: dict[str, Any], config: OperatorConfig
) -> dict[str, Any]:
    """``<rs>-head-svc`` pointing at ``cluster`` (KubeRay's ``BuildHeadServiceForRayService``)."""
    cluster_name = text(mapping(cluster.get("metadata")).get("name"))
    view = view_of(_cluster_spec(cluster), name=cluster_name, namespace=model.namespace)
    service = head_service(view, config, name=names.head_service_name(model.name), owner_reference=owner)
    service["metadata"]["namespace"] = model.namespace
    service["metadata"]["labels"] = {
        conventions.LABEL_ORIGIN_NAME: model.name,
        conventions.LABEL_ORIGIN_CRD: names.ORIGIN_CRD,
        conventions.LABEL_NODE_TYPE: "head",
        conventions.LABEL_IDENTIFIER: conventions.check_label(f"{model.name}-head"),
    }
    return service


def _generated_ports(model: ServiceModel, cluster: Mapping[str, Any]) -> dict[str, int]:
    cluster_name = text(mapping(cluster.get("metadata")).get("name"))
    return serve_ports(view_of(_cluster_spec(cluster), name=cluster_name, namespace=model.namespace))


def _default_type(model: ServiceModel) -> str:
    head = mapping(mapping(model.raw_spec.get("rayClusterConfig")).get("headGroupSpec"))
    return text(head.get("serviceType"))


def serve_service_name(model: ServiceModel) -> str:
    """The blue/green serve Service: ``spec.serveService.metadata.name`` or ``<rs>-serve-svc``."""
    user = mapping(model.raw_spec.get("serveService"))
    return text(mapping(user.get("metadata")).get("name")) or names.serve_service_name(model.name)


def rayservice_serve_service(
    model: ServiceModel, cluster: Mapping[str, Any], *, owner: dict[str, Any]
) -> dict[str, Any]:
    """The RayService's serve Service pointing at ``cluster`` (blue/green; KubeRay's ``BuildServeService``).

    Raises:
        ServiceBuildError: neither the head container nor ``spec.serveService`` has a serve port.
    """
    cluster_name = text(mapping(cluster.get("metadata")).get("name"))
    labels = {
        conventions.LABEL_ORIGIN_NAME: model.name,
        conventions.LABEL_ORIGIN_CRD: names.ORIGIN_CRD,
        conventions.LABEL_SERVE: names.serve_service_label(model.name),
    }
    selector = {conventions.LABEL_CLUSTER: cluster_name, conventions.LABEL_SERVE: "true"}
    generated = _generated_ports(model, cluster)
    user = model.raw_spec.get("serveService")
    if not isinstance(user, Mapping):
        if not generated:
            raise ServiceBuildError(NO_SERVE_PORT)
        spec: dict[str, Any] = {"selector": selector, "ports": _plain_ports(generated)}
        if _default_type(model):
            spec["type"] = _default_type(model)
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": names.serve_service_name(model.name),
                "namespace": model.namespace,
                "labels": labels,
                "ownerReferences": [owner],
            },
            "spec": spec,
        }
    service: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(user))
    metadata = service.setdefault("metadata", {}) if isinstance(service.get("metadata"), dict) else {}
    service["metadata"] = metadata
    spec = service["spec"] if isinstance(service.get("spec"), dict) else {}
    service["spec"] = spec
    spec["selector"] = selector
    ports = _user_ports(generated, spec.get("ports"))
    if not ports:
        raise ServiceBuildError(NO_SERVE_PORT_ANYWHERE)
    spec["ports"] = ports
    user_labels = metadata.get("labels")
    metadata["labels"] = {**(user_labels if isinstance(user_labels, dict) else {}), **labels}
    metadata["annotations"] = metadata.get("annotations") if isinstance(metadata.get("annotations"), dict) else {}
    metadata["name"] = text(metadata.get("name")) or names.serve_service_name(model.name)
    metadata["namespace"] = model.namespace
    metadata["ownerReferences"] = [owner]
    if not text(spec.get("type")) and _default_type(model):
        spec["type"] = _default_type(model)
    service["apiVersion"] = "v1"
    service["kind"] = "Service"
    return service


def _plain_ports(generated: Mapping[str, int]) -> list[dict[str, Any]]:
    return [{"name": name, "port": generated[name]} for name in sorted(generated)]


def _user_ports(generated: Mapping[str, int], user_ports: object) -> list[dict[str, Any]]:
    by_name: dict[str, dict[str, Any]] = {}
    for port in user_ports if isinstance(user_ports, list) else []:
        if isinstance(port, dict):
            name = text(port.get("name"))
            if name == conventions.PORT_SERVE or name.startswith(f"{conventions.PORT_SERVE}-"):
                by_name.setdefault(name, dict(port))
    merged = {name: by_name.get(name, {"name": name, "port": port}) for name, port in generated.items()}
    for name, port in by_name.items():
        merged.setdefault(name, port)
    return [merged[name] for name in sorted(merged)]


def per_cluster_serve_service(
    model: ServiceModel, cluster: Mapping[str, Any], *, owner: dict[str, Any]
) -> dict[str, Any]:
    """``<c>-serve-svc`` of an incremental upgrade, owned by its RayCluster.

    Raises:
        ServiceBuildError: the head container has no serve port.
    """
    cluster_name = text(mapping(cluster.get("metadata")).get("name"))
    generated = _generated_ports(model, cluster)
    if not generated:
        raise ServiceBuildError(NO_SERVE_PORT)
    spec: dict[str, Any] = {
        "selector": {conventions.LABEL_CLUSTER: cluster_name, conventions.LABEL_SERVE: "true"},
        "ports": _plain_ports(generated),
    }
    if _default_type(model):
        spec["type"] = _default_type(model)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.serve_service_name(cluster_name),
            "namespace": model.namespace,
            "labels": {
                conventions.LABEL_ORIGIN_NAME: cluster_name,
                conventions.LABEL_ORIGIN_CRD: names.ORIGIN_CRD,
                conventions.LABEL_SERVE: names.serve_service_label(cluster_name),
            },
            "ownerReferences": [owner],
        },
        "spec": spec,
    }


def switch_patch(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch replacing ``existing``'s spec with ``desired``'s, keeping its ClusterIP(s)."""
    spec = dict(mapping(desired.get("spec")))
    old_spec = mapping(existing.get("spec"))
    for field in ("clusterIP", "clusterIPs"):
        if field in old_spec:
            spec[field] = old_spec[field]
    return [{"op": "add", "path": "/spec", "value": spec}]


def count_serve_endpoints(endpoint_slices: list[dict[str, Any]], service_names: set[str]) -> int:
    """Distinct pod uids among Ready endpoints of the EndpointSlices of ``service_names``."""
    pods: set[str] = set()
    for slice_ in endpoint_slices:
        labels = mapping(mapping(slice_.get("metadata")).get("labels"))
        if text(labels.get(conventions.LABEL_SERVICE_NAME)) not in service_names:
            continue
        endpoints = slice_.get("endpoints")
        for endpoint in endpoints if isinstance(endpoints, list) else []:
            if not isinstance(endpoint, Mapping) or mapping(endpoint.get("conditions")).get("ready") is not True:
                continue
            uid = text(mapping(endpoint.get("targetRef")).get("uid"))
            if uid:
                pods.add(uid)
    return len(pods)
