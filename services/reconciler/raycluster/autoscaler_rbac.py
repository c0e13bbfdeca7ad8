"""ServiceAccount, Role and RoleBinding of the in-tree autoscaler (docs/behaviour.md#3.9).

Role: the three RBAC objects the autoscaler sidecar needs to read pods and patch the RayCluster, named
per docs/behaviour.md#2.1 and labelled with the cluster.

Invariants: created only when missing and never updated (KubeRay behaviour); a ServiceAccount the user
named in the head template is the user's to create: raybus never creates it (see ``plan_rbac``).

Not here: the sidecar container itself (``containers``).
"""

from __future__ import annotations

from typing import Any

from schema.ray import conventions
from services.reconciler.raycluster import names, pod_bodies
from services.reconciler.raycluster.model import ClusterView


def _labels(view: ClusterView) -> dict[str, str]:
    return {
        conventions.LABEL_CLUSTER: view.name,
        conventions.LABEL_APP_NAME: conventions.APP_NAME,
        conventions.LABEL_CREATED_BY: conventions.CREATED_BY,
    }


def user_service_account(view: ClusterView) -> str:
    """The ServiceAccount named in the head template ("" when none)."""
    spec = view.spec.head_group_spec.template.get("spec") or {}
    name = spec.get("serviceAccountName") if isinstance(spec, dict) else None
    return name if isinstance(name, str) else ""


def service_account_name(view: ClusterView) -> str:
    """CheckName(head template serviceAccountName or ``<c>``)."""
    return conventions.check_name(user_service_account(view) or view.name)


def service_account(view: ClusterView) -> dict[str, Any]:
    """The autoscaler's ServiceAccount."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": service_account_name(view),
            "namespace": view.namespace,
            "labels": _labels(view),
            "ownerReferences": [pod_bodies.owner_reference_of(view)],
        },
    }


def role(view: ClusterView) -> dict[str, Any]:
    """The autoscaler's Role: read/patch pods, resize pods, get/patch the RayCluster."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": names.autoscaler_rbac_name(view.name),
            "namespace": view.namespace,
            "labels": _labels(view),
            "ownerReferences": [pod_bodies.owner_reference_of(view)],
        },
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]},
            {"apiGroups": [conventions.GROUP], "resources": ["rayclusters"], "verbs": ["get", "patch"]},
        ],
    }


def role_binding(view: ClusterView) -> dict[str, Any]:
    """Binds the Role to the ServiceAccount."""
    name = names.autoscaler_rbac_name(view.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": name,
            "namespace": view.namespace,
            "labels": _labels(view),
            "ownerReferences": [pod_bodies.owner_reference_of(view)],
        },
        "subjects": [{"kind": "ServiceAccount", "name": service_account_name(view), "namespace": view.namespace}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
    }
