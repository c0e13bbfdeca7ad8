"""The watcher's RBAC grants exactly what the watcher needs (``services/watcher/permissions.py``), the
status service's exactly its two reviews (``services/status/access.py``), and no one else has any.
"""

from __future__ import annotations

import importlib
from datetime import UTC, datetime
from typing import Any

import pytest

from services.status.access import REQUIRED_RULES as STATUS_RULES
from services.watcher.authorize import DASHBOARD_KIND, GRANTED_RULES
from services.watcher.calls import plan_call
from services.watcher.permissions import allowed_pairs, rule_for, sample_command
from services.watcher.rbac_manifests import stale_files
from tests.deploy.render import DEPLOY, TREES, container, find, render

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
    cluster_wide = [
        (o["kind"], o["metadata"]["name"])
        for o in render("overlays/single-namespace")
        if o["kind"] in {"ClusterRole", "ClusterRoleBinding"}
    ]
    assert sorted(cluster_wide) == [("ClusterRole", "raybus-status"), ("ClusterRoleBinding", "raybus-status")]


@pytest.mark.parametrize("tree", TREES)
def test_the_status_service_may_only_review_callers(tree: str) -> None:
    assert _granted(find(tree, "ClusterRole", "raybus-status")) == set(STATUS_RULES)
    deployment = find(tree, "Deployment", "raybus-status")
    assert "--auth" in container(deployment, "status")["args"]


@pytest.mark.parametrize("tree", TREES)
def test_only_the_watcher_and_the_status_service_are_bound(tree: str) -> None:
    roles = {o["metadata"]["name"]: o for o in render(tree) if o["kind"] in {"Role", "ClusterRole"}}
    bindings = [o for o in render(tree) if o["kind"] in {"RoleBinding", "ClusterRoleBinding"}]
    assert sorted(roles) == ["raybus-status", "raybus-watcher"]
    assert len(bindings) == 2
    for binding in bindings:
        name = binding["roleRef"]["name"]
        assert name == binding["metadata"]["name"]
        assert binding["roleRef"]["kind"] == roles[name]["kind"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "raybus-system"}]


@pytest.mark.parametrize("tree", TREES)
def test_only_the_watcher_and_the_status_service_mount_an_api_token(tree: str) -> None:
    bound = {"raybus-watcher", "raybus-status"}
    for obj in render(tree):
        if obj["kind"] == "ServiceAccount" and obj["metadata"]["name"] != "raybus-watcher":
            assert obj.get("automountServiceAccountToken") is False, obj["metadata"]["name"]
        if obj["kind"] in {"Deployment", "StatefulSet", "Job"}:
            pod = obj["spec"]["template"]["spec"]
            mounts = obj["metadata"]["name"] in bound
            assert pod["automountServiceAccountToken"] is mounts, obj["metadata"]["name"]
            if mounts:
                assert pod["serviceAccountName"] == obj["metadata"]["name"]


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
