"""Names, label keys and annotation keys of the RayService controller, and the deterministic cluster name.

Role: KubeRay names a RayService's clusters ``<rs>-<rand5>`` with a random suffix. raybus derives the
five characters from a hash of stable inputs instead (the RayService uid, its generation, the active
cluster it replaces and a collision counter), so a replay of the same snapshot names the same cluster
and every new cluster of one RayService gets a fresh name.

Invariants: every function here is pure; suffixes are ``common.names.rand5`` (only ``[a-z0-9]{5}``).

Not here: the RayCluster controller's own names (``raycluster.names``).
"""

from __future__ import annotations

from typing import Final

from services.reconciler.common.names import rand5

ORIGIN_CRD: Final = "RayService"


# raybus's durable replacements for KubeRay's in-memory caches (kept on the RayCluster they describe).
ANN_DELETE_AFTER: Final = "raybus.io/delete-after"
"""RFC3339 time after which a dangling RayCluster is deleted (KubeRay: a map in the operator's memory)."""
ANN_SERVE_CONFIG_HASH: Final = "raybus.io/serve-config-hash"
"""Digest of the last serveConfigV2 submitted to the cluster (KubeRay: an LRU cache in memory)."""
RAYBUS_ANNOTATIONS: Final = (ANN_DELETE_AFTER, ANN_SERVE_CONFIG_HASH)

MAX_RAYSERVICE_NAME_LENGTH: Final = 47
DEFAULT_DELETION_DELAY_SECONDS: Final = 60
GATEWAY_LISTENER_NAME: Final = "http"
GATEWAY_LISTENER_PORT: Final = 80


def cluster_name(*, rayservice: str, uid: str, generation: int, replaces: str, taken: frozenset[str]) -> str:
    """The name of the next RayCluster of a RayService: ``<rs>-<5 chars>``.

    Args:
        rayservice: the RayService's name.
        uid: its uid (different RayServices of the same name never share cluster names).
        generation: its metadata.generation when the cluster is prepared (a spec change or a resume
            bumps it, so each new cluster gets a new name).
        replaces: the active cluster the new one will replace ("" for the first), so a cluster
            prepared again at the same generation (its predecessor vanished) is named differently.
        taken: names of RayClusters that already exist; a collision draws the next candidate.
    """
    attempt = 0
    while True:
        name = f"{rayservice}-{rand5(uid, str(generation), replaces, str(attempt))}"
        if name not in taken:
            return name
        attempt += 1


def head_service_name(rayservice: str) -> str:
    """``<rs>-head-svc``: the head Service that follows the serving cluster."""
    return f"{rayservice}-head-svc"


def serve_service_name(name: str) -> str:
    """``<name>-serve-svc`` for a RayService (blue/green) or a RayCluster (per-cluster, incremental)."""
    return f"{name}-serve-svc"


def serve_service_label(name: str) -> str:
    """The ``ray.io/serve`` *label value* of a serve Service: ``<name>-serve``."""
    return f"{name}-serve"


def gateway_name(rayservice: str) -> str:
    """``<rs>-gateway`` (incremental upgrade)."""
    return f"{rayservice}-gateway"


def httproute_name(rayservice: str) -> str:
    """``<rs>-httproute`` (incremental upgrade)."""
    return f"{rayservice}-httproute"
