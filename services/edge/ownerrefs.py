"""The custom resources an object's ownerReferences name: what the watch and the applier ask of an owner.

The watch projects an owner's deletion before its children's (``watch.owners``); the applier holds a
create whose owner the watch has seen go (``apply.staleness``). Both read the same references.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schema.keys import KEY_KINDS
from schema.ray import conventions


@dataclass(frozen=True, slots=True)
class Owner:
    """A custom resource named by an ownerReference."""

    kind: str
    name: str
    uid: str


def custom_owners(obj: dict[str, Any]) -> list[Owner]:
    """The custom resources (RayCluster, RayJob, RayService, RayCronJob) the object's ownerReferences name."""
    metadata = obj.get("metadata")
    refs = metadata.get("ownerReferences") if isinstance(metadata, dict) else None
    if not isinstance(refs, list):
        return []
    return [
        Owner(kind=str(ref.get("kind")), name=str(ref.get("name", "")), uid=str(ref.get("uid")))
        for ref in refs
        if isinstance(ref, dict)
        and ref.get("kind") in KEY_KINDS
        and str(ref.get("apiVersion", "")).startswith(f"{conventions.GROUP}/")
        and ref.get("uid")
    ]
