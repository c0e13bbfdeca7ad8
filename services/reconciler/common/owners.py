"""Controller owner references: every object a reconcile creates points at the custom resource it
belongs to, so Kubernetes garbage-collects it (docs/behaviour.md#2.4)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schema.messages import ObjectRef
from schema.objects import metadata_of, text
from schema.ray.conventions import API_VERSION


def owner_reference(owner: ObjectRef) -> dict[str, Any]:
    """A controller owner reference to ``owner`` (``blockOwnerDeletion``, as KubeRay sets it)."""
    return {
        "apiVersion": owner.api_version,
        "kind": owner.kind,
        "name": owner.name,
        "uid": owner.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owner_reference_to(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """A controller owner reference to a ``ray.io/v1`` object read from the snapshot."""
    metadata = metadata_of(obj)
    return owner_reference(
        ObjectRef(
            api_version=API_VERSION,
            kind=kind,
            namespace=text(metadata.get("namespace")),
            name=text(metadata.get("name")),
            uid=text(metadata.get("uid")),
        )
    )
