"""Render the kustomize trees of ``deploy/`` with the kubectl of the venv (never a machine's own)."""

from __future__ import annotations

import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
TREES = ("base", "overlays/dev", "overlays/single-namespace")
KUBECTL = Path(sys.prefix) / "bin" / "kubectl"


@cache
def render(tree: str) -> tuple[dict[str, Any], ...]:
    """Every object ``kubectl kustomize deploy/<tree>`` renders.

    Raises:
        AssertionError: kustomize failed (its stderr is the message).
    """
    result = subprocess.run(
        [str(KUBECTL), "kustomize", str(DEPLOY / tree)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return tuple(d for d in yaml.load_all(result.stdout, Loader=yaml.CSafeLoader) if d)


def find(tree: str, kind: str, name: str) -> dict[str, Any]:
    """The rendered object of this kind whose name is ``name`` (or ``name-<hash>`` for generated ones)."""
    for obj in render(tree):
        found = obj["metadata"]["name"]
        if obj["kind"] == kind and (found == name or found.rpartition("-")[0] == name):
            return obj
    raise LookupError(f"{kind}/{name} not rendered in {tree}")


def container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    """A container of a workload's pod template."""
    for item in obj["spec"]["template"]["spec"]["containers"]:
        if item["name"] == name:
            return dict(item)
    raise LookupError(name)
