"""Every metric a Grafana dashboard in deploy/grafana queries is exported by the services: the names are
read from each dashboard's PromQL and looked up in the ``/metrics`` of the watcher, the reconciler and
the status service of a ``raybus up`` stack that ran the console tests' history."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from tests.console.stack import RaybusUp, record_history

pytestmark = pytest.mark.timeout(600)  # the first test also starts raybus up and records the history
DASHBOARDS = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
METRIC = re.compile(r"\b((?:raybus|kuberay)_[a-z0-9_]+)")
LABELS = re.compile(r"\b(?:by|without)\s*\([^)]*\)|\{[^}]*\}")
"""Grouping clauses and label matchers: label names there (``raybus_kind``) are no metrics."""
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def queried(dashboard: Path) -> set[str]:
    """The raybus and KubeRay metric names in a dashboard's queries."""
    names: set[str] = set()
    for panel in json.loads(dashboard.read_text())["panels"]:
        for target in panel.get("targets", []):
            names |= set(METRIC.findall(LABELS.sub("", target["expr"])))
    return names


def exported(urls: list[str]) -> dict[str, str]:
    """Metric family → type, over every service's exposition."""
    families: dict[str, str] = {}
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith("# TYPE "):
                    _, _, name, kind = line.split(" ", 3)
                    families[name] = kind
    return families


def is_exported(name: str, families: dict[str, str]) -> bool:
    if name in families:
        return True
    base = next((name.removesuffix(s) for s in HISTOGRAM_SERIES if name.endswith(s)), None)
    return base is not None and families.get(base) == "histogram"


def test_dashboards_query_only_exported_metrics(stack: RaybusUp) -> None:
    record_history(stack)
    urls = stack.metrics_urls()
    assert len(urls) == 5, urls  # the watch side, applier, prober, reconciler, status
    families = exported(urls)
    dashboards = sorted(DASHBOARDS.glob("*.json"))
    assert {d.name for d in dashboards} >= {"raybus-pipeline.json", "kuberay-operator.json"}
    for dashboard in dashboards:
        names = queried(dashboard)
        assert names, dashboard.name
        missing = sorted(n for n in names if not is_exported(n, families))
        assert not missing, f"{dashboard.name} queries metrics no service exports: {missing}"
    kuberay = queried(DASHBOARDS / "kuberay-operator.json")
    assert {"kuberay_cluster_info", "kuberay_cluster_provisioned_duration_seconds"} <= kuberay
    assert "kuberay_cluster_condition_provisioned" in kuberay
