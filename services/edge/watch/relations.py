"""The live relation index behind :class:`keymap.KeyIndex`, and who depends on which of its entries.

Role: the projection feeds every object it places (and every object that goes away) through
:class:`Relations`; it answers two questions: the current :class:`KeyIndex` (RayCluster → originating
keys, RayCluster → selecting RayJobs, Service → keys) and, when an entry changes, which cached objects
read it and must be re-mapped (a RayJob that starts selecting a cluster pulls that cluster and its head
Service into the RayJob's key; a Service that gains keys pulls its EndpointSlices along).

Invariants: :attr:`Relations.index` is a read-only view over the live dictionaries (no copy per event);
``record`` / ``forget`` return exactly the entries whose value changed.

Not here: any I/O; the rules themselves (``keymap``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schema.keys import ReconcileKey
from services.edge.watch.keymap import KeyIndex, NamespacedName, Ref, origin_keys, selected_clusters

ObjectId = tuple[str, str]
"""``(kind, uid)`` of a cached object."""


def _namespaced_name(obj: Mapping[str, Any]) -> NamespacedName | None:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    namespace, name = metadata.get("namespace"), metadata.get("name")
    if isinstance(namespace, str) and namespace and isinstance(name, str) and name:
        return namespace, name
    return None


class Relations:
    """The index :func:`keymap.keys_for` reads, maintained from the objects the watcher sees."""

    def __init__(self) -> None:
        self._owners: dict[NamespacedName, tuple[ReconcileKey, ...]] = {}
        self._selected_by: dict[NamespacedName, dict[ReconcileKey, None]] = {}
        self._job_selects: dict[ReconcileKey, tuple[NamespacedName, ...]] = {}
        self._service_keys: dict[NamespacedName, tuple[ReconcileKey, ...]] = {}
        self._dependents: dict[Ref, dict[ObjectId, None]] = {}
        self._depends_on: dict[ObjectId, tuple[Ref, ...]] = {}
        self.index = KeyIndex(
            cluster_owners=self._owners, cluster_selectors=self._selected_by, service_keys=self._service_keys
        )

    def record(self, kind: str, obj: Mapping[str, Any], keys: tuple[ReconcileKey, ...]) -> list[Ref]:
        """Note the current version of an object; returns the index entries whose value changed.

        Args:
            kind: the object's kind.
            obj: the object.
            keys: the keys the object now maps to (used for Services).
        """
        nn = _namespaced_name(obj)
        if nn is None:
            return []
        if kind == "RayCluster":
            owners = origin_keys(obj)
            if self._owners.get(nn, ()) != owners:
                if owners:
                    self._owners[nn] = owners
                else:
                    self._owners.pop(nn, None)
                return [("cluster", *nn)]
            return []
        if kind == "RayJob":
            return self._set_selection(ReconcileKey(kind="RayJob", namespace=nn[0], name=nn[1]), obj)
        if kind == "Service" and self._service_keys.get(nn, ()) != keys:
            if keys:
                self._service_keys[nn] = keys
            else:
                self._service_keys.pop(nn, None)
            return [("service", *nn)]
        return []

    def forget(self, kind: str, obj: Mapping[str, Any]) -> list[Ref]:
        """Drop an object that went away; returns the index entries whose value changed."""
        nn = _namespaced_name(obj)
        if nn is None:
            return []
        if kind == "RayCluster" and self._owners.pop(nn, None) is not None:
            return [("cluster", *nn)]
        if kind == "RayJob":
            return self._set_selection(ReconcileKey(kind="RayJob", namespace=nn[0], name=nn[1]), None)
        if kind == "Service" and self._service_keys.pop(nn, None) is not None:
            return [("service", *nn)]
        return []

    def _set_selection(self, job: ReconcileKey, obj: Mapping[str, Any] | None) -> list[Ref]:
        new = tuple((job.namespace, c) for c in selected_clusters(obj)) if obj is not None else ()
        old = self._job_selects.get(job, ())
        if new == old:
            return []
        changed: list[Ref] = []
        for nn in old:
            if nn not in new:
                selectors = self._selected_by.get(nn)
                if selectors is not None:
                    selectors.pop(job, None)
                    if not selectors:
                        del self._selected_by[nn]
                changed.append(("cluster", *nn))
        for nn in new:
            if nn not in old:
                self._selected_by.setdefault(nn, {})[job] = None
                changed.append(("cluster", *nn))
        if new:
            self._job_selects[job] = new
        else:
            self._job_selects.pop(job, None)
        return changed

    def track(self, object_id: ObjectId, refs: tuple[Ref, ...]) -> None:
        """Remember which index entries an object's keys were computed from."""
        old = self._depends_on.get(object_id, ())
        if old == refs:
            return
        for ref in old:
            dependents = self._dependents.get(ref)
            if dependents is not None:
                dependents.pop(object_id, None)
                if not dependents:
                    del self._dependents[ref]
        for ref in refs:
            self._dependents.setdefault(ref, {})[object_id] = None
        if refs:
            self._depends_on[object_id] = refs
        else:
            self._depends_on.pop(object_id, None)

    def untrack(self, object_id: ObjectId) -> None:
        """Forget an object's dependencies (it went away)."""
        self.track(object_id, ())

    def dependents(self, ref: Ref) -> list[ObjectId]:
        """Cached objects whose keys read ``ref`` (a snapshot: safe to iterate while re-mapping)."""
        return list(self._dependents.get(ref, ()))
