"""Which reconcile keys a Kubernetes object belongs to (docs/architecture.md#keys); pure functions over plain data.

Rules, in the order keys are listed (duplicates removed):

1. A RayCluster, RayJob, RayService or RayCronJob (group ``ray.io``) → its own key.
2. A ``controller: true`` ownerReference to one of those four kinds → the owner's key.
3. Labels ``ray.io/originated-from-crd`` + ``ray.io/originated-from-cr-name`` naming one of the four
   kinds → that key (Services, submitter Jobs and RayClusters created for a RayJob/RayService).
4. A RayJob labelled ``ray.io/cronjob-name`` → the RayCronJob's key.
5. A RayCluster → also the RayJobs whose ``spec.clusterSelector`` names it (``index.cluster_selectors``).
6. Any other object labelled ``ray.io/cluster=<c>`` → the RayCluster key of ``<c>`` and the keys that
   RayCluster originates from (``index.cluster_owners``: a Pod of a RayJob's cluster reaches the RayJob).
   Services labelled so also reach the RayJobs that select ``<c>``: a RayJob in clusterSelector mode
   reads the cluster's head Service for its dashboard URL. Pods do not (a shared cluster would fan its
   Pods out to every RayJob using it, and those RayJobs never read Pods).
7. An EndpointSlice labelled ``kubernetes.io/service-name=<s>`` → the keys of Service ``<s>``
   (``index.service_keys``).
8. Any other object created for a RayCluster ``<c>`` (rule 2 or 3 names it) → also the keys ``<c>``
   originates from (``index.cluster_owners``), as rule 6 does by label: a RayService incremental
   upgrade's per-cluster ``<c>-serve-svc`` is owned by ``<c>`` and carries no ``ray.io/cluster`` label,
   yet its EndpointSlices are what the RayService counts as serve endpoints.
9. An EndpointSlice goes only to RayService keys, whatever the rules above name: no other controller
   reads EndpointSlices, and at scale they were a tenth of a RayCluster's inputs for nothing.

Invariants: the result depends only on the object and the :class:`KeyIndex` given, and
:func:`dependencies` names exactly the index entries :func:`keys_for` read, so the projection can
re-map an object when one of them changes. Cluster-scoped objects (no namespace) map to no key.

Not here: maintaining the index (``relations``) or doing anything with the keys (``projection``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from schema.keys import KEY_KINDS, KeyKind, ReconcileKey
from schema.ray import conventions

ENDPOINTS_READER: Final[KeyKind] = "RayService"
"""The one kind whose reconcile reads EndpointSlices (rule 9)."""

NamespacedName = tuple[str, str]
"""``(namespace, name)``."""

RefKind = Literal["cluster", "service"]
Ref = tuple[RefKind, str, str]
"""An index entry an object's keys depend on: ``("cluster" | "service", namespace, name)``."""


@dataclass(frozen=True)
class KeyIndex:
    """Relations between objects that :func:`keys_for` needs, built from the informer caches.

    Attributes:
        cluster_owners: RayCluster → the keys it originates from (its RayJob/RayService).
        cluster_selectors: RayCluster → the RayJobs whose clusterSelector names it.
        service_keys: Service → the keys the Service itself maps to.
    """

    cluster_owners: Mapping[NamespacedName, Collection[ReconcileKey]] = field(default_factory=dict)
    cluster_selectors: Mapping[NamespacedName, Collection[ReconcileKey]] = field(default_factory=dict)
    service_keys: Mapping[NamespacedName, Collection[ReconcileKey]] = field(default_factory=dict)


EMPTY_INDEX: Final = KeyIndex()

_NO_KEYS: Final[tuple[ReconcileKey, ...]] = ()


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _labels(metadata: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(metadata.get("labels"))


def _group(api_version: object) -> str:
    return api_version.rpartition("/")[0] if isinstance(api_version, str) else ""


def _key_kind(kind: object) -> KeyKind | None:
    if isinstance(kind, str) and kind in KEY_KINDS:
        return kind  # type: ignore[return-value]  # checked against KEY_KINDS
    return None


def origin_keys(obj: Mapping[str, Any]) -> tuple[ReconcileKey, ...]:
    """Keys an object was created for: controller owner references and ``originated-from`` labels.

    For a RayCluster this is the RayJob or RayService that owns it (rules 2 and 3).
    """
    metadata = _mapping(obj.get("metadata"))
    namespace = metadata.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        return _NO_KEYS
    found: dict[ReconcileKey, None] = {}
    refs = metadata.get("ownerReferences")
    if isinstance(refs, list):
        for ref in refs:
            if not isinstance(ref, Mapping) or ref.get("controller") is not True:
                continue
            kind = _key_kind(ref.get("kind"))
            name = ref.get("name")
            if kind and isinstance(name, str) and name and _group(ref.get("apiVersion")) == conventions.GROUP:
                found[ReconcileKey(kind=kind, namespace=namespace, name=name)] = None
    labels = _labels(metadata)
    crd = _key_kind(labels.get(conventions.LABEL_ORIGIN_CRD))
    cr_name = labels.get(conventions.LABEL_ORIGIN_NAME)
    if crd and isinstance(cr_name, str) and cr_name:
        found[ReconcileKey(kind=crd, namespace=namespace, name=cr_name)] = None
    return tuple(found)


def selected_clusters(rayjob: Mapping[str, Any]) -> tuple[str, ...]:
    """The RayCluster a RayJob's ``spec.clusterSelector`` names (``ray.io/cluster``), if any."""
    selector = _mapping(_mapping(rayjob.get("spec")).get("clusterSelector"))
    name = selector.get(conventions.LABEL_CLUSTER)
    return (name,) if isinstance(name, str) and name else ()


def keys_for(kind: str, obj: Mapping[str, Any], index: KeyIndex = EMPTY_INDEX) -> tuple[ReconcileKey, ...]:
    """Every reconcile key ``obj`` (of ``kind``) belongs to, in rule order, without duplicates.

    Args:
        kind: the object's kind (the resource table's kind; the object's own ``kind`` may be absent).
        obj: the object as read from the API server.
        index: relations from the informer caches.

    Returns:
        The keys; empty for an object that belongs to no custom resource.
    """
    metadata = _mapping(obj.get("metadata"))
    namespace = metadata.get("namespace")
    name = metadata.get("name")
    if not isinstance(namespace, str) or not namespace or not isinstance(name, str) or not name:
        return _NO_KEYS
    found: dict[ReconcileKey, None] = {}
    own = _key_kind(kind)
    api_version = obj.get("apiVersion")
    if own and (api_version is None or _group(api_version) == conventions.GROUP):
        found[ReconcileKey(kind=own, namespace=namespace, name=name)] = None
    origins = origin_keys(obj)
    for key in origins:
        found[key] = None
    if own != "RayCluster":
        for origin in origins:
            if origin.kind == "RayCluster":
                for key in index.cluster_owners.get((namespace, origin.name), ()):
                    found[key] = None
    labels = _labels(metadata)
    if own == "RayJob":
        cron = labels.get(conventions.LABEL_CRONJOB_NAME)
        if isinstance(cron, str) and cron:
            found[ReconcileKey(kind="RayCronJob", namespace=namespace, name=cron)] = None
    if own == "RayCluster":
        for key in index.cluster_selectors.get((namespace, name), ()):
            found[key] = None
    else:
        cluster = labels.get(conventions.LABEL_CLUSTER)
        if isinstance(cluster, str) and cluster:
            ref = (namespace, cluster)
            found[ReconcileKey(kind="RayCluster", namespace=namespace, name=cluster)] = None
            for key in index.cluster_owners.get(ref, ()):
                found[key] = None
            if kind == "Service":
                for key in index.cluster_selectors.get(ref, ()):
                    found[key] = None
    if kind == "EndpointSlice":
        service = labels.get(conventions.LABEL_SERVICE_NAME)
        if isinstance(service, str) and service:
            for key in index.service_keys.get((namespace, service), ()):
                found[key] = None
        return tuple(key for key in found if key.kind == ENDPOINTS_READER)
    return tuple(found) if found else _NO_KEYS


def dependencies(kind: str, obj: Mapping[str, Any]) -> tuple[Ref, ...]:
    """The index entries :func:`keys_for` reads for this object (what makes it re-map when they change)."""
    metadata = _mapping(obj.get("metadata"))
    namespace = metadata.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        return ()
    refs: list[Ref] = []
    labels = _labels(metadata)
    if kind == "RayCluster":
        name = metadata.get("name")
        if isinstance(name, str) and name:
            refs.append(("cluster", namespace, name))
    else:
        cluster = labels.get(conventions.LABEL_CLUSTER)
        if isinstance(cluster, str) and cluster:
            refs.append(("cluster", namespace, cluster))
        for origin in origin_keys(obj):
            ref: Ref = ("cluster", namespace, origin.name)
            if origin.kind == "RayCluster" and ref not in refs:
                refs.append(ref)
    if kind == "EndpointSlice":
        service = labels.get(conventions.LABEL_SERVICE_NAME)
        if isinstance(service, str) and service:
            refs.append(("service", namespace, service))
    return tuple(refs)
