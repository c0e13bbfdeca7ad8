"""Object builders for RayService tests: KubeRay's sample manifests and small hand-made RayServices."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tests.helpers import samples_dir
from tests.unit.apiserver import NAMESPACE

SAMPLES = samples_dir()
IMAGE = "rayproject/ray:2.52.0"

SERVE_CONFIG = """\
applications:
  - name: fruit_app
    import_path: fruit.deployment_graph
    route_prefix: /fruit
    deployments:
      - name: MangoStand
        num_replicas: 1
  - name: math_app
    import_path: conditional_dag.serve_dag
    route_prefix: /calc
    deployments:
      - name: Adder
        num_replicas: 1
"""


def load_sample(name: str) -> dict[str, Any]:
    """A KubeRay sample (``samples/<name>.yaml``); its first RayService document."""
    path = SAMPLES / f"{name}.yaml"
    assert path.exists(), f"KubeRay sample missing: {path}"
    for document in yaml.safe_load_all(path.read_text()):
        if isinstance(document, dict) and document.get("kind") == "RayService":
            document["metadata"].setdefault("namespace", NAMESPACE)
            return document
    raise AssertionError(f"no RayService in {path}")


def cluster_config(*, image: str = IMAGE, autoscaling: bool = False, serve_port: bool = True) -> dict[str, Any]:
    """A small valid RayClusterSpec with a serve port."""
    ports = [
        {"containerPort": 6379, "name": "gcs-server"},
        {"containerPort": 8265, "name": "dashboard"},
        {"containerPort": 10001, "name": "client"},
    ]
    if serve_port:
        ports.append({"containerPort": 8000, "name": "serve"})
    spec: dict[str, Any] = {
        "rayVersion": "2.52.0",
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": {"containers": [{"name": "ray-head", "image": image, "ports": ports}]}},
        },
        "workerGroupSpecs": [
            {
                "groupName": "small-group",
                "replicas": 1,
                "minReplicas": 1,
                "maxReplicas": 5,
                "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-worker", "image": image}]}},
            }
        ],
    }
    if autoscaling:
        spec["enableInTreeAutoscaling"] = True
    return spec


def rayservice(
    name: str = "rs",
    *,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    finalizer: bool = True,
    **spec: Any,
) -> dict[str, Any]:
    """A RayService object (not yet stored); ``spec`` keys are camelCase RayService spec fields."""
    body: dict[str, Any] = {"serveConfigV2": SERVE_CONFIG, "rayClusterConfig": cluster_config()}
    body.update(spec)
    for key in [k for k, v in body.items() if v is None]:
        del body[key]
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if finalizer:
        metadata["finalizers"] = ["ray.io/rayservice-finalizer"]
    obj: dict[str, Any] = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": metadata, "spec": body}
    if status is not None:
        obj["status"] = copy.deepcopy(status)
    return obj


def incremental_strategy(*, step: int = 10, interval: int = 30, surge: int = 10) -> dict[str, Any]:
    """``upgradeStrategy`` for NewClusterWithIncrementalUpgrade."""
    return {
        "type": "NewClusterWithIncrementalUpgrade",
        "clusterUpgradeOptions": {
            "gatewayClassName": "istio",
            "stepSizePercent": step,
            "intervalSeconds": interval,
            "maxSurgePercent": surge,
        },
    }
