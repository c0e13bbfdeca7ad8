"""RayCluster objects for the unit tests: KubeRay samples (with the CRD defaults the API server would
apply) and a small programmable cluster."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from schema.config import FeatureGates, OperatorConfig, OperatorSwitches
from tests.helpers import samples_dir

UID = "11111111-2222-3333-4444-555555555555"


def with_crd_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """Apply the RayCluster CRD's schema defaults (the API server does this on create)."""
    out = copy.deepcopy(obj)
    for group in out.get("spec", {}).get("workerGroupSpecs") or []:
        group.setdefault("replicas", 0)
        group.setdefault("minReplicas", 0)
        group.setdefault("maxReplicas", 2_147_483_647)
        group.setdefault("numOfHosts", 1)
    return out


def sample(name: str) -> dict[str, Any]:
    """The RayCluster of ``samples/<name>.yaml`` (fails, never skips, when the file is missing)."""
    path: Path = samples_dir() / f"{name}.yaml"
    assert path.exists(), f"sample {path} missing"
    for doc in yaml.safe_load_all(path.read_text()):
        if isinstance(doc, dict) and doc.get("kind") == "RayCluster":
            doc["metadata"].update(namespace="default", uid=UID, resourceVersion="1", generation=1)
            return with_crd_defaults(doc)
    raise AssertionError(f"no RayCluster in {path}")


def container(name: str = "ray-worker", *, cpu: str = "1", memory: str = "1Gi", **extra: Any) -> dict[str, Any]:
    """A Ray container."""
    return {
        "name": name,
        "image": "rayproject/ray:2.52.0",
        "resources": {"limits": {"cpu": cpu, "memory": memory}, "requests": {"cpu": cpu, "memory": memory}},
        **extra,
    }


def group(
    name: str = "workers",
    *,
    replicas: int = 2,
    min_replicas: int = 0,
    max_replicas: int = 10,
    num_of_hosts: int = 1,
    **extra: Any,
) -> dict[str, Any]:
    """A worker group."""
    return {
        "groupName": name,
        "replicas": replicas,
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "numOfHosts": num_of_hosts,
        "rayStartParams": {},
        "template": {"spec": {"containers": [container()]}},
        **extra,
    }


def cluster(
    name: str = "rc",
    *,
    groups: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A RayCluster with a head and the given worker groups (default: one group of 2)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "uid": UID,
        "resourceVersion": "1",
        "generation": 1,
    }
    if annotations:
        meta["annotations"] = annotations
    if labels:
        meta["labels"] = labels
    body: dict[str, Any] = {
        "rayVersion": "2.52.0",
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": {"containers": [container("ray-head", memory="2Gi")]}},
        },
        "workerGroupSpecs": groups if groups is not None else [group()],
    }
    body.update(spec)
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": body}


def config(**switches: Any) -> OperatorConfig:
    """An operator config with switches overridden (gates via ``gates=FeatureGates(...)``)."""
    gates = switches.pop("gates", FeatureGates())
    return OperatorConfig(gates=gates, switches=OperatorSwitches(**switches))
