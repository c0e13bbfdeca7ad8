"""Whether a change of an object is a change of its key's own custom resource in its status alone.

Role: the projection marks such a watch event (``WatchEvent.status_only``); most are the echo of raybus's own
status write. The reconciler still decides on it, but a decision that has nothing to do on such events
alone is not recorded, as KubeRay's RayCluster and RayService controllers do not even reconcile on a change
that leaves the generation, labels and annotations alone. Here the test is stricter than KubeRay's: any
change outside ``status`` (and ``metadata.resourceVersion``) counts, ownerReferences and finalizers too.

Invariants: pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from schema.keys import ReconcileKey

_UNCOMPARED_METADATA: Final = frozenset({"resourceVersion", "managedFields"})


def status_only(key: ReconcileKey, kind: str, previous: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether ``current``, the next version of ``previous`` (an object of ``kind`` under ``key``), is the
    key's own custom resource with only its status changed."""
    metadata = current.get("metadata")
    if kind != key.kind or not isinstance(metadata, Mapping):
        return False
    if metadata.get("name") != key.name or metadata.get("namespace") != key.namespace:
        return False
    return _outside_status(previous) == _outside_status(current)


def _outside_status(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    kept = (
        {k: v for k, v in metadata.items() if k not in _UNCOMPARED_METADATA}
        if isinstance(metadata, Mapping)
        else metadata
    )
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": kept}
