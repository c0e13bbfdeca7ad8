"""The first step every RayJob and RayService pass shares: is there an object, and is it raybus's to
reconcile (docs/behaviour.md#5.1, #6.1)?

Role: read the custom resource from the snapshot, or end the pass with ``<section>/gone`` (the CR was
deleted from the cluster) or ``<section>/managed-by-external`` (``spec.managedBy`` names a controller
other than KubeRay's; raybus then writes nothing for it, as KubeRay does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schema.decision import Decision, Snapshot
from schema.objects import mapping
from schema.ray.conventions import MANAGED_BY_KUBERAY


def owner_to_reconcile(snapshot: Snapshot, section: str) -> Mapping[str, Any] | Decision:
    """The key's custom resource, or the Decision that ends the pass before anything else.

    Args:
        snapshot: every entry of the key.
        section: the docs/behaviour.md section whose rule ids the ending Decision carries (``"5.1"``).
    """
    owner = snapshot.owner()
    if owner is None:
        return Decision(rules=(f"{section}/gone",))
    managed_by = mapping(owner.get("spec")).get("managedBy")
    if managed_by is not None and managed_by != MANAGED_BY_KUBERAY:
        return Decision(rules=(f"{section}/managed-by-external",))
    return owner
