"""The resource table: which kinds kubesim serves, and the registry that adds CRD kinds at runtime.

Built-in kinds are one literal table (group, version, kind, plural, namespaced, status subresource,
short names). A CRD contributes one :class:`ResourceInfo` per served version; all versions of a
resource share one storage bucket keyed by ``(group, plural)`` and differ only in the apiVersion the
client sees (conversion strategy ``None``, as most CRDs use). Built-ins are never converted: core/v1
events and events.k8s.io/v1 events are kept as two separate resources on purpose, since their
schemas differ and nothing in raybus reads one through the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

StorageKey = tuple[str, str]
"""``(group, plural)``: one bucket of objects, shared by every served version of a resource."""

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceInfo:
    """One served resource at one version."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    status: bool = False
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    singular: str = ""
    custom: bool = False
    schema: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    printer_columns: tuple[dict[str, Any], ...] = field(default=(), compare=False, repr=False)

    @property
    def api_version(self) -> str:
        """``v1`` for the core group, ``group/version`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> StorageKey:
        """The bucket this resource's objects live in."""
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        """The kind of list responses."""
        return f"{self.kind}List"

    @property
    def singular_name(self) -> str:
        """The singular name used in discovery."""
        return self.singular or self.kind.lower()


def _r(
    group: str,
    version: str,
    kind: str,
    plural: str,
    namespaced: bool = True,
    status: bool = False,
    short: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
) -> ResourceInfo:
    return ResourceInfo(group, version, kind, plural, namespaced, status, short, categories)


BUILTINS: tuple[ResourceInfo, ...] = (
    _r("", "v1", "Namespace", "namespaces", False, True, ("ns",)),
    _r("", "v1", "Pod", "pods", True, True, ("po",), ("all",)),
    _r("", "v1", "Service", "services", True, True, ("svc",), ("all",)),
    _r("", "v1", "Endpoints", "endpoints", True, False, ("ep",)),
    _r("", "v1", "Event", "events", True, False, ("ev",)),
    _r("", "v1", "Secret", "secrets"),
    _r("", "v1", "ConfigMap", "configmaps", True, False, ("cm",)),
    _r("", "v1", "ServiceAccount", "serviceaccounts", True, False, ("sa",)),
    _r("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, True, ("pvc",)),
    _r("", "v1", "Node", "nodes", False, True, ("no",)),
    _r("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
    _r("events.k8s.io", "v1", "Event", "events", True, False, ("ev",)),
    _r("batch", "v1", "Job", "jobs", True, True, (), ("all",)),
    _r("batch", "v1", "CronJob", "cronjobs", True, True, ("cj",), ("all",)),
    _r("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    _r("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
    _r("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
    _r("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
    _r("networking.k8s.io", "v1", "Ingress", "ingresses", True, True, ("ing",)),
    _r("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", True, False, ("netpol",)),
    _r("networking.k8s.io", "v1", "IngressClass", "ingressclasses", False),
    _r("coordination.k8s.io", "v1", "Lease", "leases"),
    _r("apps", "v1", "Deployment", "deployments", True, True, ("deploy",), ("all",)),
    _r("apps", "v1", "StatefulSet", "statefulsets", True, True, ("sts",), ("all",)),
    _r("apps", "v1", "ReplicaSet", "replicasets", True, True, ("rs",), ("all",)),
    _r("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True, True, ("pdb",)),
    _r("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", True, True, ("hpa",), ("all",)),
    _r(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        False,
        True,
        ("crd", "crds"),
    ),
)

CRD_KEY: StorageKey = ("apiextensions.k8s.io", "customresourcedefinitions")
NAMESPACE_KEY: StorageKey = ("", "namespaces")
POD_KEY: StorageKey = ("", "pods")
NODE_KEY: StorageKey = ("", "nodes")


class Registry:
    """The resources currently served, looked up by URL coordinates or by storage bucket."""

    def __init__(self) -> None:
        self._by_gvr: dict[tuple[str, str, str], ResourceInfo] = {}
        for info in BUILTINS:
            self.add(info)

    def add(self, info: ResourceInfo) -> None:
        """Serve ``info`` (replacing an earlier registration of the same group/version/plural)."""
        self._by_gvr[(info.group, info.version, info.plural)] = info

    def remove_storage(self, key: StorageKey) -> None:
        """Stop serving every version of a resource."""
        for gvr in [g for g, info in self._by_gvr.items() if info.storage_key == key]:
            del self._by_gvr[gvr]

    def lookup(self, group: str, version: str, plural: str) -> ResourceInfo | None:
        """The resource at ``/apis/<group>/<version>/<plural>``, if served."""
        return self._by_gvr.get((group, version, plural))

    def all(self) -> list[ResourceInfo]:
        """Every served resource/version, in registration order."""
        return list(self._by_gvr.values())

    def group_versions(self) -> dict[str, list[str]]:
        """Served versions per group, in registration order (first = preferred)."""
        out: dict[str, list[str]] = {}
        for info in self._by_gvr.values():
            versions = out.setdefault(info.group, [])
            if info.version not in versions:
                versions.append(info.version)
        return out

    def by_kind(self, api_version: str, kind: str) -> ResourceInfo | None:
        """The resource of objects with this apiVersion and kind (owner references use this)."""
        group, _, version = api_version.rpartition("/")
        for info in self._by_gvr.values():
            if info.group == group and info.version == version and info.kind == kind:
                return info
        return None
