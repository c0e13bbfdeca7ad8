"""The one table of Kubernetes resource types the watcher reads and the applier writes.

Role: every other watcher module (informers, key mapping, call planning, RBAC rules) reads this table, so
adding a resource is one row here. A row says where the resource lives (group, version, plural,
namespaced), whether an informer watches it (and with which label selector), whether the applier may
write it, and whether its API is optional (discovered at start: a missing optional API is skipped, a
missing required one stops the watcher with a clear error).

Invariants:
- Kinds are unique in the table: the kind is the projection's entry kind (``schema.subjects.entry_key``),
  so ``Snapshot.of_kind("Pod")`` finds Pods.
- :func:`sanitize` is applied to every object before it reaches the bus: Secrets keep only their
  metadata (``data``/``stringData`` and kubectl's last-applied annotation, which embeds the data, are
  removed), and ``metadata.managedFields`` is dropped from everything (large, never read by reconcile).

Not here: which reconcile keys an object maps to (``keymap``), and how a command becomes an HTTP call
(``apply.plan``).

Label selectors mirror KubeRay's informer cache filter (docs/behaviour.md#2.2): Pods only with ``ray.io/node-type``
in {head, worker, redis-cleanup}, batch Jobs only with ``app.kubernetes.io/created-by=kuberay-operator``;
and Secrets only with ``ray.io/cluster`` (the auth Secrets raybus creates), so other Secrets never reach
the watcher at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from schema.keys import KEY_KINDS
from schema.ray import conventions


@dataclass(frozen=True, kw_only=True)
class ResourceType:
    """One Kubernetes resource type.

    Attributes:
        group: API group ("" for core).
        version: served version used for reads and writes.
        kind: object kind; also the projection's entry kind.
        plural: URL resource name.
        namespaced: objects live in namespaces.
        watched: an informer lists and watches it.
        writable: the applier may create, patch and delete it.
        status_subresource: ``PatchStatus`` goes through ``/status``.
        optional: the API may be absent (an uninstalled CRD); discovered at start, skipped when missing.
        label_selector: server-side filter of the informer ("" = everything).
        strip_fields: top-level fields removed before projecting (no secret ever reaches the bus).
    """

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    watched: bool = True
    writable: bool = True
    status_subresource: bool = False
    optional: bool = False
    label_selector: str = ""
    strip_fields: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        """``v1`` for the core group, ``<group>/<version>`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def name(self) -> str:
        """``<plural>`` for the core group, ``<plural>.<group>`` otherwise (kubectl's resource name)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def is_key_kind(self) -> bool:
        """One of the four top-level custom resources (RayCluster, RayJob, RayService, RayCronJob)."""
        return self.group == conventions.GROUP and self.kind in KEY_KINDS

    def collection_path(self, namespace: str | None) -> str:
        """``/api/v1[/namespaces/<ns>]/<plural>`` or ``/apis/<group>/<version>[/namespaces/<ns>]/<plural>``."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"


_SECRET_STRIP: Final = ("data", "stringData")
LAST_APPLIED_ANNOTATION: Final = "kubectl.kubernetes.io/last-applied-configuration"

_RAY_NODE_TYPES: Final = (conventions.NODE_HEAD, conventions.NODE_WORKER, conventions.NODE_REDIS_CLEANUP)
_RAY_NODES: Final = f"{conventions.LABEL_NODE_TYPE} in ({','.join(_RAY_NODE_TYPES)})"
"""The Pods KubeRay's informer cache keeps: Ray nodes and the Redis cleanup Job's."""

LEASE: Final = ResourceType(
    group="coordination.k8s.io", version="v1", kind="Lease", plural="leases", watched=False, writable=False
)
"""The watcher's leader election Lease (``election``): read and written there only, never watched, and
never written by the applier."""

RESOURCES: Final[tuple[ResourceType, ...]] = (
    ResourceType(
        group=conventions.GROUP,
        version=conventions.VERSION,
        kind="RayCluster",
        plural="rayclusters",
        status_subresource=True,
    ),
    ResourceType(
        group=conventions.GROUP, version=conventions.VERSION, kind="RayJob", plural="rayjobs", status_subresource=True
    ),
    ResourceType(
        group=conventions.GROUP,
        version=conventions.VERSION,
        kind="RayService",
        plural="rayservices",
        status_subresource=True,
    ),
    # RayCronJob is alpha behind a feature gate: its CRD may not be installed.
    ResourceType(
        group=conventions.GROUP,
        version=conventions.VERSION,
        kind="RayCronJob",
        plural="raycronjobs",
        status_subresource=True,
        optional=True,
    ),
    ResourceType(
        group="",
        version="v1",
        kind="Pod",
        plural="pods",
        status_subresource=True,
        label_selector=_RAY_NODES,
    ),
    ResourceType(group="", version="v1", kind="Service", plural="services", status_subresource=True),
    # Only the Secrets raybus makes (auth tokens, labelled with their cluster): the watcher never even
    # receives other Secrets of the cluster, and what it receives is stripped to metadata.
    ResourceType(
        group="",
        version="v1",
        kind="Secret",
        plural="secrets",
        strip_fields=_SECRET_STRIP,
        label_selector=conventions.LABEL_CLUSTER,
    ),
    ResourceType(group="", version="v1", kind="ServiceAccount", plural="serviceaccounts"),
    ResourceType(group="", version="v1", kind="PersistentVolumeClaim", plural="persistentvolumeclaims"),
    ResourceType(
        group="batch",
        version="v1",
        kind="Job",
        plural="jobs",
        status_subresource=True,
        label_selector=f"{conventions.LABEL_CREATED_BY}={conventions.CREATED_BY}",
    ),
    ResourceType(group="rbac.authorization.k8s.io", version="v1", kind="Role", plural="roles"),
    ResourceType(group="rbac.authorization.k8s.io", version="v1", kind="RoleBinding", plural="rolebindings"),
    ResourceType(group="networking.k8s.io", version="v1", kind="Ingress", plural="ingresses", status_subresource=True),
    ResourceType(group="networking.k8s.io", version="v1", kind="NetworkPolicy", plural="networkpolicies"),
    ResourceType(group="discovery.k8s.io", version="v1", kind="EndpointSlice", plural="endpointslices", writable=False),
    ResourceType(
        group=conventions.GATEWAY_GROUP,
        version=conventions.GATEWAY_VERSION,
        kind="Gateway",
        plural="gateways",
        status_subresource=True,
        optional=True,
    ),
    ResourceType(
        group=conventions.GATEWAY_GROUP,
        version=conventions.GATEWAY_VERSION,
        kind="HTTPRoute",
        plural="httproutes",
        status_subresource=True,
        optional=True,
    ),
    # Events are written (EmitEvent), never watched.
    ResourceType(group="", version="v1", kind="Event", plural="events", watched=False),
    LEASE,
)

_BY_KIND: Final[Mapping[str, ResourceType]] = {r.kind: r for r in RESOURCES}
_BY_API_KIND: Final[Mapping[tuple[str, str], ResourceType]] = {(r.api_version, r.kind): r for r in RESOURCES}
assert len(_BY_KIND) == len(RESOURCES), "kinds must be unique: they are the projection's entry kinds"


def watched_resources() -> tuple[ResourceType, ...]:
    """The resources informers watch, top-level kinds first (so relations are known before children)."""
    watched = [r for r in RESOURCES if r.watched]
    return tuple(sorted(watched, key=lambda r: (not r.is_key_kind, r.kind not in ("Service",))))


def by_kind(kind: str) -> ResourceType | None:
    """The resource whose objects have this kind (kinds are unique in the table)."""
    return _BY_KIND.get(kind)


def by_api_version_kind(api_version: str, kind: str) -> ResourceType | None:
    """The resource of an object reference; a different version of a known group/kind also resolves."""
    found = _BY_API_KIND.get((api_version, kind))
    if found is not None:
        return found
    candidate = _BY_KIND.get(kind)
    if candidate is not None and api_version.rpartition("/")[0] == candidate.group:
        return candidate
    return None


def select_served(
    served: Iterable[tuple[str, str, str]], resources: Iterable[ResourceType] | None = None
) -> tuple[list[ResourceType], list[ResourceType]]:
    """Split resources into (available, missing optional) given the served ``(group, version, plural)``.

    Raises:
        LookupError: a required resource is not served (e.g. the ray.io CRDs are not installed).
    """
    served_set = set(served)
    available: list[ResourceType] = []
    skipped: list[ResourceType] = []
    missing: list[str] = []
    for resource in resources if resources is not None else watched_resources():
        if (resource.group, resource.version, resource.plural) in served_set:
            available.append(resource)
        elif resource.optional:
            skipped.append(resource)
        else:
            missing.append(resource.name)
    if missing:
        raise LookupError(f"the API server does not serve {', '.join(missing)} (are the CRDs installed?)")
    return available, skipped


def sanitize(resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as it may be projected: without secret content and without managedFields.

    Returns the same dict when nothing is removed (the hot path: most objects), else a shallow copy; the
    input is never mutated.
    """
    metadata = obj.get("metadata")
    strip_managed = isinstance(metadata, dict) and "managedFields" in metadata
    strip_top = any(f in obj for f in resource.strip_fields)
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    strip_annotation = (
        bool(resource.strip_fields) and isinstance(annotations, dict) and LAST_APPLIED_ANNOTATION in annotations
    )
    if not (strip_managed or strip_top or strip_annotation):
        return obj
    clean = {k: v for k, v in obj.items() if k not in resource.strip_fields}
    if isinstance(metadata, dict) and (strip_managed or strip_annotation):
        meta = {k: v for k, v in metadata.items() if k != "managedFields"}
        if strip_annotation and isinstance(annotations, dict):
            meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED_ANNOTATION}
        clean["metadata"] = meta
    return clean
