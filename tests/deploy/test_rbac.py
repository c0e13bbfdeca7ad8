"""The watcher's RBAC grants exactly what the watcher needs (``services/watcher/permissions.py``), and
only the watcher has any.
"""

from __future__ import annotations

import importlib
from datetime import UTC, datetime
from typing import Any

import pytest

from services.watcher.authorize import DASHBOARD_KIND, GRANTED_RULES
from services.watcher.calls import plan_call
from services.watcher.permissions import allowed_pairs, rule_for, sample_command
from services.watcher.rbac_manifests import stale_files
from tests.deploy.render import DEPLOY, TREES, find, render

WRITE_VERBS = frozenset({"create", "patch", "delete", "deletecollection", "update"})


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


def test_the_role_manifests_are_generated_from_the_authorization_table() -> None:
    assert stale_files(DEPLOY) == [], "run `raybus rbac`"


def test_every_write_granted_is_a_row_of_the_authorization_table() -> None:
    """Apart from the autoscaler Role's grants, finalizers and the proxies, a write permission exists only
    because some custom-resource kind's reconcile emits that command."""
    rows = set()
    for kind, verb in allowed_pairs():
        if kind == DASHBOARD_KIND and verb in {"submit_ray_job", "stop_ray_job", "put_serve_config"}:
            continue  # dashboard calls go through services/proxy
        call = plan_call(sample_command(kind, verb), now=datetime(2000, 1, 1, tzinfo=UTC), generate=lambda _: "")
        rows.add(rule_for(call.method, call.path, call.query))
    writes = {rule for rule in _required_rules() if rule[2] in WRITE_VERBS}
    unexplained = {rule for rule in writes - rows - GRANTED_RULES if not rule[1].endswith(("/finalizers", "/proxy"))}
    assert unexplained == set()


def test_secrets_are_never_patched_or_deleted() -> None:
    secrets = {verb for group, resource, verb in _required_rules() if (group, resource) == ("", "secrets")}
    assert secrets == {"create", "get", "list", "watch"}
