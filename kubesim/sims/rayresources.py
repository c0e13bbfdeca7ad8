"""The Ray resources of a cluster's nodes, read from its RayCluster as Ray would count them.

Each node (the head, and every replica of each worker group) has ``num-gpus`` and the custom
``resources`` of its group's ``rayStartParams`` (GPUs default to the container's ``nvidia.com/gpu`` limit,
as KubeRay passes it). The dashboard simulator uses this to keep a job that asks for resources no node has
``PENDING``, as Ray does. CPUs and memory are not counted: every simulated node has enough.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubesim.hooks import GVR, Store
from kubesim.sims.loop import safe_get
from schema.ray import conventions

RAYCLUSTERS = GVR(conventions.GROUP, conventions.VERSION, "rayclusters")


def _float(value: Any) -> float:
    try:
        return float(str(value).strip("'\""))
    except ValueError:
        return 0.0


def _custom(raw: Any) -> dict[str, float]:
    """``rayStartParams.resources``: JSON, possibly wrapped in quotes (KubeRay's samples write it so)."""
    value: Any = raw
    for _ in range(3):
        if not isinstance(value, str):
            break
        text = value.strip().strip("'")
        try:
            value = json.loads(text)
        except ValueError:
            return {}
    if not isinstance(value, Mapping):
        return {}
    return {str(k): _float(v) for k, v in value.items()}


def group_node(group: Mapping[str, Any]) -> dict[str, float]:
    """The counted resources of one node of a head or worker group."""
    params = group.get("rayStartParams") or {}
    containers = ((group.get("template") or {}).get("spec") or {}).get("containers") or [{}]
    limits = (containers[0].get("resources") or {}).get("limits") or {}
    gpus = params.get("num-gpus", limits.get("nvidia.com/gpu", 0))
    return {"GPU": _float(gpus), **_custom(params.get("resources"))}


def node_resources(store: Store, namespace: str, cluster: str) -> list[dict[str, float]]:
    """One entry per node of a RayCluster (empty when the RayCluster is unknown)."""
    # One read, not a list: a job submit used to copy every RayCluster of the namespace (10,000 RayJobs:
    # nine tenths of kubesim's CPU, and seconds of delay for every other request).
    found = safe_get(store, RAYCLUSTERS, namespace, cluster)
    if found is None:
        return []
    spec = found.get("spec") or {}
    nodes = [group_node(spec.get("headGroupSpec") or {})]
    for group in spec.get("workerGroupSpecs") or []:
        nodes += [group_node(group)] * int(group.get("replicas") or 0)
    return nodes


def fits(request: Mapping[str, float], nodes: list[dict[str, float]]) -> bool:
    """Whether some node has every requested resource (an empty request always fits)."""
    wanted = {name: amount for name, amount in request.items() if amount > 0}
    return not wanted or any(all(node.get(n, 0.0) >= a for n, a in wanted.items()) for node in nodes)
