"""Small RayCluster bodies for the tests that create many clusters."""

from __future__ import annotations

from typing import Any


def small_cluster(name: str, *, workers: int = 1) -> dict[str, Any]:
    """A head and ``workers`` workers with tiny resources."""
    container = {
        "name": "ray-head",
        "image": "rayproject/ray:2.46.0",
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {
            "rayVersion": "2.46.0",
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container]}}},
            "workerGroupSpecs": [
                {
                    "groupName": "small",
                    "replicas": workers,
                    "minReplicas": 0,
                    "maxReplicas": 10,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [{**container, "name": "ray-worker"}]}},
                }
            ],
        },
    }
