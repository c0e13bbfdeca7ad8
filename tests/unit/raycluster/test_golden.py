"""Golden files: the objects the first reconcile of each conformance sample creates.

``tests/golden/raycluster/<sample>.yaml`` holds every body of the first decision (head Service, head Pod,
worker Pods, headless Service, autoscaler RBAC). Regenerate with ``RAYBUS_UPDATE_GOLDEN=1``, then review
the diff against docs/behaviour.md#3 line by line. Every Pod and Service must also pass kubernetes-validate (strict).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from schema.messages import CreateObject
from services.reconciler.raycluster import reconcile
from tests.unit.raycluster import builders
from tests.unit.raycluster.sim import NOW, World

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "raycluster"
K8S_VERSION = "1.33.0"
SAMPLES = [
    "ray-cluster.sample",
    "ray-cluster.complete",
    "ray-cluster.autoscaler",
    "ray-cluster.autoscaler-v2",
    "ray-cluster.head-command",
    "ray-cluster.overwrite-command",
    "ray-cluster.custom-head-service",
    "ray-cluster.tpu-v4-multihost",
]


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def created_bodies(sample: str) -> list[dict[str, Any]]:
    world = World(builders.sample(sample))
    decision = reconcile(world.snapshot(), NOW, world.config)
    return [c.body for c in decision.commands if isinstance(c, CreateObject)]


@pytest.mark.parametrize("sample", [pytest.param(s, id=s) for s in SAMPLES])
def test_golden(sample: str) -> None:
    bodies = created_bodies(sample)
    path = GOLDEN / f"{sample}.yaml"
    if os.environ.get("RAYBUS_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.dump_all(bodies, Dumper=_NoAliases, sort_keys=True, width=120))
    assert path.exists(), f"golden file {path} missing: run with RAYBUS_UPDATE_GOLDEN=1"
    expected = list(yaml.safe_load_all(path.read_text()))
    assert bodies == expected


@pytest.mark.parametrize("sample", [pytest.param(s, id=s) for s in SAMPLES])
def test_generated_objects_validate(sample: str) -> None:
    bodies = created_bodies(sample)
    assert bodies
    for body in bodies:
        kubernetes_validate.validate(body, K8S_VERSION, strict=True)
