"""Render the kustomize trees of ``deploy/`` with the kubectl of the venv (never a machine's own), and the
Helm chart with the helm that ``tools/helm/build`` builds from the version pinned in ``tools/helm/go.mod``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
TREES = ("base", "overlays/dev", "overlays/single-namespace")
KUBECTL = Path(sys.prefix) / "bin" / "kubectl"
CHART = DEPLOY / "helm" / "raybus"
HELM_BUILD = ROOT / "tools" / "helm" / "build"
RELEASE = "raybus"
NAMESPACE = "raybus-system"


class ChartError(Exception):
    """helm refused the chart or its values; the message is helm's stderr."""


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
    try:
        return find_in(render(tree), kind, name)
    except LookupError:
        raise LookupError(f"{kind}/{name} not rendered in {tree}") from None


def container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    """A container of a workload's pod template."""
    for item in obj["spec"]["template"]["spec"]["containers"]:
        if item["name"] == name:
            return dict(item)
    raise LookupError(name)


@cache
def helm_binary() -> Path:
    """The pinned helm CLI: ``tools/helm/build`` builds it once into its cache and prints its path.

    Raises:
        AssertionError: the build failed (its stderr is the message).
    """
    result = subprocess.run([str(HELM_BUILD)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip().splitlines()[-1])


def helm(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run the pinned helm with ``args``; the caller checks the outcome."""
    return subprocess.run([str(helm_binary()), *args], input=stdin, capture_output=True, text=True, check=False)


@cache
def _render_chart(values_json: str, chart: Path, namespace: str, include_crds: bool) -> tuple[dict[str, Any], ...]:
    args = ["template", RELEASE, str(chart), "--namespace", namespace, "--values", "-"]
    result = helm(*args, *(["--include-crds"] if include_crds else []), stdin=values_json)
    if result.returncode != 0:
        raise ChartError(result.stderr.strip())
    return tuple(d for d in yaml.load_all(result.stdout, Loader=yaml.CSafeLoader) if d)


def render_chart(
    values: Mapping[str, Any] | None = None,
    *,
    chart: Path = CHART,
    namespace: str = NAMESPACE,
    include_crds: bool = True,
) -> tuple[dict[str, Any], ...]:
    """Every object ``helm template`` renders of ``chart`` with ``values`` over its defaults, as release
    ``raybus`` in ``namespace`` (CRDs first, with ``include_crds``). The objects include the topology Job,
    which a real install runs to completion; the result is cached per argument set, so callers must not
    change it.

    Raises:
        ChartError: helm refused the values (values.schema.json, a template's check) or the chart.
    """
    return _render_chart(json.dumps(dict(values or {}), sort_keys=True), chart, namespace, include_crds)


def find_in(objects: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    """The object of this kind whose name is ``name`` (or ``name-<hash>`` for generated ones)."""
    for obj in objects:
        found = obj["metadata"]["name"]
        if obj["kind"] == kind and (found == name or found.rpartition("-")[0] == name):
            return obj
    raise LookupError(f"{kind}/{name} not rendered")
