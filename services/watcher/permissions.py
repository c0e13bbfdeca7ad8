"""The Kubernetes permissions the watcher needs: every ``(apiGroup, resource, verb)`` it uses.

PROVISIONAL: written by the deploy helper from SPEC §2-§7 so that ``tests/deploy/test_rbac.py`` has a
source of truth; the watcher owns this module and should derive it from ``services.watcher.resources``
and the calls the applier plans. The RBAC in ``deploy/base/watcher/rbac.yaml`` (and the
single-namespace overlay's Role) must grant exactly this set: the test fails on a missing permission
and on an extra one (least privilege).

Why some entries exist:
- ``pods/resize`` patch, ``pods`` patch and ``rayclusters`` get/patch: the watcher creates the
  autoscaler Role with these rules (SPEC §3.9), and Kubernetes only lets it grant what it holds.
- ``services/proxy`` and ``pods/proxy`` get/create: dashboard calls through the API server
  (``--use-kubernetes-proxy``), GET and POST.
- ``secrets`` get/list/watch/create: the auth-token Secret is created (SPEC §4.1) and tokens are read
  for dashboard calls; the watcher never updates or deletes Secrets (owner references clean them up).
- ``endpointslices`` read-only: serve endpoint counts (RayService status).

Deliberately absent: configmaps, endpoints, namespaces, nodes, leases (HA is message de-duplication,
not leader election), cert-manager and OpenShift routes (alpha mTLS gate / OpenShift; add them with
the feature).
"""

from __future__ import annotations

from typing import Final

READ: Final = ("get", "list", "watch")
WRITE: Final = ("create", "update", "patch", "delete")
RAY_KINDS: Final = ("rayclusters", "rayjobs", "rayservices", "raycronjobs")


def _rules(group: str, resources: tuple[str, ...], verbs: tuple[str, ...]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for resource in resources for verb in verbs}


REQUIRED_RULES: Final[frozenset[tuple[str, str, str]]] = frozenset(
    _rules("ray.io", RAY_KINDS, READ + WRITE)
    | _rules("ray.io", tuple(f"{k}/status" for k in RAY_KINDS), ("get", "update", "patch"))
    | _rules("ray.io", tuple(f"{k}/finalizers" for k in RAY_KINDS), ("update",))
    | _rules("", ("pods",), (*READ, *WRITE, "deletecollection"))
    | _rules("", ("pods/resize",), ("patch",))
    | _rules("", ("services",), READ + WRITE)
    | _rules("", ("pods/proxy", "services/proxy"), ("get", "create"))
    | _rules("", ("events",), ("create", "patch"))
    | _rules("events.k8s.io", ("events",), ("create", "patch"))
    | _rules("", ("secrets", "serviceaccounts"), (*READ, "create"))
    | _rules("", ("persistentvolumeclaims",), (*READ, "create", "delete"))
    | _rules("batch", ("jobs",), READ + WRITE)
    | _rules("rbac.authorization.k8s.io", ("roles", "rolebindings"), (*READ, "create"))
    | _rules("networking.k8s.io", ("ingresses", "networkpolicies"), READ + WRITE)
    | _rules("discovery.k8s.io", ("endpointslices",), READ)
    | _rules("gateway.networking.k8s.io", ("gateways", "httproutes"), READ + WRITE)
)
