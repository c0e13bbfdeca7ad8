"""The Services of a RayCluster: head Service, headless worker Service, serve Service (docs/behaviour.md#4.1).

Role: build each Service body exactly as KubeRay does, and find existing ones in a snapshot the way
KubeRay lists them (by labels for the head and headless Services, by name for the serve Service).

Invariants:
- Head Service ports: the Ray container's ports (an unnamed port is called ``<port>-port``), KubeRay's
  defaults when it has none, ``metrics`` always; each with ``appProtocol: tcp``, sorted by name.
- A generated head Service of type ""/ClusterIP is headless (``clusterIP: None``,
  ``publishNotReadyAddresses: true``) unless operator switch ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE is on;
  a user ``headService`` keeps its own ClusterIP settings.
- Existing Services are never updated (KubeRay creates them once).

Not here: Ingress (``ingress``), deciding when to create (``reconcile``).
"""

from __future__ import annotations

from typing import Any, Final

from schema.config import OperatorConfig
from schema.ray import conventions
from services.reconciler.raycluster import model, names, pod_bodies
from services.reconciler.raycluster.model import ClusterView

DEFAULT_PORTS: Final = conventions.DEFAULT_PORTS


def head_ports(view: ClusterView) -> dict[str, int]:
    """Port name → port of the head Ray container (with KubeRay's defaults and ``metrics``)."""
    container = model.ray_container(view.spec.head_group_spec.template) or {}
    raw = container.get("ports")
    ports: dict[str, int] = {}
    if isinstance(raw, list):
        for port in raw:
            if not isinstance(port, dict):
                continue
            number = port.get("containerPort")
            if not isinstance(number, int) or isinstance(number, bool):
                continue
            name = port.get("name") or f"{number}-port"
            ports[str(name)] = number
    if not ports:
        ports = dict(DEFAULT_PORTS)
    ports.setdefault("metrics", DEFAULT_PORTS["metrics"])
    return ports


def service_ports(ports: dict[str, int]) -> list[dict[str, Any]]:
    """Service ports sorted by name, each with ``appProtocol: tcp``."""
    return [{"appProtocol": "tcp", "name": name, "port": ports[name]} for name in sorted(ports)]


def head_selector(view: ClusterView) -> dict[str, str]:
    """The labels that identify the head Service (and select the head pod)."""
    template_labels = (view.spec.head_group_spec.template.get("metadata") or {}).get("labels") or {}
    app_name = template_labels.get(conventions.LABEL_APP_NAME) if isinstance(template_labels, dict) else None
    return {
        conventions.LABEL_CLUSTER: view.name,
        conventions.LABEL_NODE_TYPE: conventions.NODE_HEAD,
        conventions.LABEL_IDENTIFIER: names.identifier(view.name, conventions.NODE_HEAD),
        conventions.LABEL_APP_NAME: app_name if isinstance(app_name, str) and app_name else conventions.APP_NAME,
        conventions.LABEL_CREATED_BY: conventions.CREATED_BY,
    }


def head_service(
    view: ClusterView,
    config: OperatorConfig,
    *,
    name: str | None = None,
    owner_reference: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The head Service body.

    Args:
        view: the cluster.
        config: operator configuration (the ClusterIP switch).
        name: override the name (RayJob/RayService ``<owner>-head-svc``); default per docs/behaviour.md#2.1.
        owner_reference: override the owner (default: the RayCluster).

    Returns:
        The Service; its ``spec.ports`` is empty when the cluster has no ports at all (an error).
    """
    head = view.spec.head_group_spec
    selector = head_selector(view)
    annotations = dict(view.spec.head_service_annotations or {})
    ports = service_ports(head_ports(view))
    owner = owner_reference if owner_reference is not None else pod_bodies.owner_reference_of(view)
    if head.head_service is not None:
        service = pod_bodies.deep_copy(head.head_service)
        meta = service.setdefault("metadata", {})
        spec = service.setdefault("spec", {})
        spec["selector"] = selector
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        if not meta["annotations"]:
            del meta["annotations"]
        spec["ports"] = [*(spec.get("ports") or []), *ports]
        meta["labels"] = {**(meta.get("labels") or {}), **selector}
        meta["name"] = name or meta.get("name") or names.head_service_name(view.name)
        meta["namespace"] = view.namespace
        if not spec.get("type") and head.service_type:
            spec["type"] = head.service_type
        meta["ownerReferences"] = [owner]
        service["apiVersion"] = "v1"
        service["kind"] = "Service"
        return service
    metadata: dict[str, Any] = {
        "name": name or names.head_service_name(view.name),
        "namespace": view.namespace,
        "labels": dict(selector),
        "ownerReferences": [owner],
    }
    if annotations:
        metadata["annotations"] = annotations
    spec_out: dict[str, Any] = {"selector": selector, "ports": ports}
    if head.service_type:
        spec_out["type"] = head.service_type
    if head.service_type in ("", "ClusterIP") and not config.switches.enable_ray_head_cluster_ip_service:
        spec_out["clusterIP"] = "None"
        spec_out["publishNotReadyAddresses"] = True
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec_out}


def headless_service(view: ClusterView) -> dict[str, Any]:
    """``<c>-headless``: DNS for the pods of multi-host groups."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.headless_service_name(view.name),
            "namespace": view.namespace,
            "labels": {conventions.LABEL_HEADLESS_SVC: view.name},
            "ownerReferences": [pod_bodies.owner_reference_of(view)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {conventions.LABEL_CLUSTER: view.name, conventions.LABEL_NODE_TYPE: conventions.NODE_WORKER},
            "publishNotReadyAddresses": True,
        },
    }


def serve_ports(view: ClusterView) -> dict[str, int]:
    """The head ports named ``serve`` or ``serve-*``."""
    return {k: v for k, v in head_ports(view).items() if k == "serve" or k.startswith("serve-")}


def serve_service(view: ClusterView) -> dict[str, Any]:
    """``<c>-serve-svc`` (annotation ``ray.io/enable-serve-service``); no ports → an error upstream."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.serve_service_name(view.name),
            "namespace": view.namespace,
            "labels": {
                conventions.LABEL_ORIGIN_NAME: view.name,
                conventions.LABEL_ORIGIN_CRD: "RayCluster",
                conventions.LABEL_SERVE: f"{view.name}-serve",
            },
            "ownerReferences": [pod_bodies.owner_reference_of(view)],
        },
        "spec": {"selector": {conventions.LABEL_CLUSTER: view.name}, "ports": service_ports(serve_ports(view))},
    }


def labels_match(obj: dict[str, Any], wanted: dict[str, str]) -> bool:
    """True when ``obj``'s labels include every pair of ``wanted``."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return isinstance(labels, dict) and all(labels.get(k) == v for k, v in wanted.items())


def find_head_services(view: ClusterView, services: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Services labelled as this cluster's head Service."""
    wanted = {
        conventions.LABEL_CLUSTER: view.name,
        conventions.LABEL_NODE_TYPE: conventions.NODE_HEAD,
        conventions.LABEL_IDENTIFIER: names.identifier(view.name, conventions.NODE_HEAD),
    }
    return [s for s in services if labels_match(s, wanted)]


def find_headless_services(view: ClusterView, services: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Services labelled ``ray.io/headless-worker-svc=<c>``."""
    return [s for s in services if labels_match(s, {conventions.LABEL_HEADLESS_SVC: view.name})]
