"""The watcher's RBAC grants exactly what the watcher needs (``services/watcher/permissions.py``), and
only the watcher has any.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from tests.deploy.render import TREES, find, render


def _required_rules() -> frozenset[tuple[str, str, str]]:
    try:
        module = importlib.import_module("services.watcher.permissions")
    except ImportError as exc:
        pytest.fail(f"services/watcher/permissions.py (REQUIRED_RULES) is missing: {exc}")
    rules: frozenset[tuple[str, str, str]] = module.REQUIRED_RULES
    return rules


def _granted(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    granted = set()
    for rule in role["rules"]:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in {rule}"
                    granted.add((group, resource, verb))
    return granted


def _diff(granted: set[tuple[str, str, str]]) -> dict[str, list[tuple[str, str, str]]]:
    required = _required_rules()
    return {"missing": sorted(required - granted), "extra": sorted(granted - required)}


def test_cluster_role_is_exactly_the_required_rules() -> None:
    granted = _granted(find("base", "ClusterRole", "raybus-watcher"))
    assert _diff(granted) == {"missing": [], "extra": []}


def test_single_namespace_role_is_exactly_the_required_rules() -> None:
    granted = _granted(find("overlays/single-namespace", "Role", "raybus-watcher"))
    assert _diff(granted) == {"missing": [], "extra": []}
    kinds = {obj["kind"] for obj in render("overlays/single-namespace")}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}


@pytest.mark.parametrize("tree", TREES)
def test_only_the_watcher_is_bound(tree: str) -> None:
    roles = [o for o in render(tree) if o["kind"] in {"Role", "ClusterRole"}]
    bindings = [o for o in render(tree) if o["kind"] in {"RoleBinding", "ClusterRoleBinding"}]
    assert [r["metadata"]["name"] for r in roles] == ["raybus-watcher"]
    assert len(bindings) == 1
    (binding,) = bindings
    assert binding["roleRef"]["name"] == "raybus-watcher"
    assert binding["roleRef"]["kind"] == roles[0]["kind"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "raybus-watcher", "namespace": "raybus-system"}]


@pytest.mark.parametrize("tree", TREES)
def test_only_the_watcher_mounts_an_api_token(tree: str) -> None:
    for obj in render(tree):
        if obj["kind"] == "ServiceAccount" and obj["metadata"]["name"] != "raybus-watcher":
            assert obj.get("automountServiceAccountToken") is False, obj["metadata"]["name"]
        if obj["kind"] in {"Deployment", "StatefulSet", "Job"}:
            pod = obj["spec"]["template"]["spec"]
            is_watcher = obj["metadata"]["name"] == "raybus-watcher"
            assert pod["automountServiceAccountToken"] is is_watcher, obj["metadata"]["name"]
            if is_watcher:
                assert pod["serviceAccountName"] == "raybus-watcher"
