"""The head Ingress (``headGroupSpec.enableIngress``, docs/behaviour.md#4.1).

Role: build ``<c>-head-ingress`` (one rule to the head Service's dashboard port) and decide whether an
existing one must be created, patched back to the wanted labels/annotations/spec, or left alone
because another owner holds the name.

Invariants: annotations are every RayCluster annotation except ``kubernetes.io/ingress.class``, which
becomes ``ingressClassName``; an API-server-defaulted ``ingressClassName`` is kept when we set none.

Not here: OpenShift Routes (raybus targets plain Kubernetes; see the module header of ``reconcile``).
"""

from __future__ import annotations

from typing import Any, Literal

from schema.ray import conventions
from services.reconciler.raycluster import model, names, pod_bodies, services
from services.reconciler.raycluster.model import ClusterView


def ingress(view: ClusterView) -> dict[str, Any]:
    """The wanted Ingress body."""
    options = view.spec.head_group_spec.ingress_options
    port = services.head_ports(view).get(conventions.PORT_DASHBOARD, conventions.DEFAULT_DASHBOARD_PORT)
    path: dict[str, Any] = {
        "path": (options.path if options is not None else "/") or "/",
        "pathType": (options.path_type if options is not None else "Prefix") or "Prefix",
        "backend": {"service": {"name": model.head_service_name(view), "port": {"number": port}}},
    }
    rule: dict[str, Any] = {"http": {"paths": [path]}}
    if options is not None and options.host:
        rule["host"] = options.host
    spec: dict[str, Any] = {"rules": [rule]}
    if options is not None and options.tls:
        spec["tls"] = [dict(t) for t in options.tls]
    ingress_class = view.annotations.get(conventions.ANN_INGRESS_CLASS)
    if ingress_class:
        spec["ingressClassName"] = ingress_class
    metadata: dict[str, Any] = {
        "name": names.ingress_name(view.name),
        "namespace": view.namespace,
        "labels": {
            conventions.LABEL_CLUSTER: view.name,
            conventions.LABEL_IDENTIFIER: names.identifier(view.name, conventions.NODE_HEAD),
            conventions.LABEL_APP_NAME: conventions.APP_NAME,
            conventions.LABEL_CREATED_BY: conventions.CREATED_BY,
        },
        "ownerReferences": [pod_bodies.owner_reference_of(view)],
    }
    annotations = {k: v for k, v in view.annotations.items() if k != conventions.ANN_INGRESS_CLASS}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": metadata, "spec": spec}


IngressAction = Literal["create", "update", "foreign", "none"]


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    """``obj`` has a controller owner reference to ``uid``."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("uid") == uid and r.get("controller") for r in refs)


def plan_ingress(view: ClusterView, existing: dict[str, Any] | None) -> tuple[IngressAction, dict[str, Any]]:
    """What to do with the Ingress, and the body (full for create, a merge patch for update)."""
    wanted = ingress(view)
    if existing is None:
        return "create", wanted
    if not owned_by(existing, view.uid):
        return "foreign", {}
    meta = existing.get("metadata") or {}
    spec = dict(existing.get("spec") or {})
    want_spec = dict(wanted["spec"])
    if "ingressClassName" not in want_spec and "ingressClassName" in spec:
        want_spec["ingressClassName"] = spec["ingressClassName"]
    patch: dict[str, Any] = {}
    if (meta.get("labels") or {}) != wanted["metadata"]["labels"]:
        patch.setdefault("metadata", {})["labels"] = wanted["metadata"]["labels"]
    want_ann = wanted["metadata"].get("annotations", {})
    have_ann = meta.get("annotations") or {}
    if have_ann != want_ann:
        ann_patch: dict[str, Any] = {k: None for k in have_ann if k not in want_ann}
        ann_patch.update(want_ann)
        patch.setdefault("metadata", {})["annotations"] = ann_patch
    if spec != want_spec:
        spec_patch: dict[str, Any] = {k: None for k in spec if k not in want_spec}
        spec_patch.update(want_spec)
        patch["spec"] = spec_patch
    return ("update", patch) if patch else ("none", {})
