"""Each watcher role's RBAC grants exactly what that role needs (``services/edge/permissions.py``) to its
own ServiceAccount, the status service's exactly its two reviews (``services/status/access.py``), and no
one else has any.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.edge.apply.authorize import DASHBOARD_KIND, GRANTED_RULES
from services.edge.apply.plan import plan_call
from services.edge.permissions import (
    NAMESPACE_RULES_BY_ROLE,
    REQUIRED_RULES,
    RULES_BY_ROLE,
    NamedRule,
    allowed_pairs,
    rule_for,
    sample_command,
)
from services.edge.rbac_manifests import NAMESPACE_ROLE_SUFFIX, component_name, stale_files
from services.edge.watch.election import LEASE_NAME
from services.runtime.settings import ROLE_COMMANDS, WATCHER_ROLES, WatcherRole
from services.status.access import REQUIRED_RULES as STATUS_RULES
from tests.deploy.render import DEPLOY, TREES, container, find, render

WRITE_VERBS = frozenset({"create", "patch", "delete", "deletecollection", "update"})
READ_VERBS = frozenset({"list", "watch"})
LEASES = ("coordination.k8s.io", "leases")


def _granted_named(role: dict[str, Any]) -> set[NamedRule]:
    granted = set()
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in {rule}"
                    for name in rule.get("resourceNames", [""]):
                        granted.add((group, resource, verb, name))
    return granted


def _granted(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    granted = _granted_named(role)
    assert all(not name for *_, name in granted), f"resourceNames in {role['metadata']['name']}"
    return {(group, resource, verb) for group, resource, verb, _ in granted}


def _diff(granted: set[tuple[str, str, str]], role: WatcherRole) -> dict[str, list[tuple[str, str, str]]]:
    required = RULES_BY_ROLE[role]
    return {"missing": sorted(required - granted), "extra": sorted(granted - required)}


@pytest.mark.parametrize("role", WATCHER_ROLES)
def test_each_cluster_role_is_exactly_its_roles_rules(role: WatcherRole) -> None:
    granted = _granted(find("base", "ClusterRole", component_name(role)))
    assert _diff(granted, role) == {"missing": [], "extra": []}


@pytest.mark.parametrize("role", WATCHER_ROLES)
def test_each_single_namespace_role_is_exactly_its_roles_rules(role: WatcherRole) -> None:
    granted = _granted(find("overlays/single-namespace", "Role", component_name(role)))
    assert _diff(granted, role) == {"missing": [], "extra": []}


def test_the_single_namespace_overlay_keeps_only_the_status_services_cluster_role() -> None:
    cluster_wide = [
        (o["kind"], o["metadata"]["name"])
        for o in render("overlays/single-namespace")
        if o["kind"] in {"ClusterRole", "ClusterRoleBinding"}
    ]
    assert sorted(cluster_wide) == [("ClusterRole", "raybus-status"), ("ClusterRoleBinding", "raybus-status")]


@pytest.mark.parametrize("tree", TREES)
def test_the_lease_role_names_the_lease_in_raybus_system(tree: str) -> None:
    role = find(tree, "Role", component_name("watch") + NAMESPACE_ROLE_SUFFIX)
    assert role["metadata"]["namespace"] == "raybus-system"
    assert _granted_named(role) == set(NAMESPACE_RULES_BY_ROLE["watch"])
    assert _granted_named(role) == {
        (*LEASES, "get", LEASE_NAME),
        (*LEASES, "update", LEASE_NAME),
        (*LEASES, "create", ""),  # the authorizer sees no name on a create
    }


def test_only_the_watch_role_has_rules_in_its_own_namespace() -> None:
    assert {role for role, rules in NAMESPACE_RULES_BY_ROLE.items() if rules} == {"watch"}


def test_the_watch_role_writes_only_its_lease_and_the_events_of_what_it_refuses() -> None:
    assert {rule for rule in RULES_BY_ROLE["watch"] if rule[2] not in READ_VERBS} == {("", "events", "create")}
    writes = {rule for rule in NAMESPACE_RULES_BY_ROLE["watch"] if rule[2] in WRITE_VERBS}
    assert {rule[:2] for rule in writes} == {LEASES}


def test_the_applier_lists_and_watches_only_what_the_autoscaler_role_grants() -> None:
    """Its facts come from KV: it holds list and watch only because it creates a Role granting them."""
    assert {rule for rule in RULES_BY_ROLE["apply"] if rule[2] in READ_VERBS} <= GRANTED_RULES


def test_the_prober_only_reads() -> None:
    assert RULES_BY_ROLE["probe"] == {("", "secrets", "get"), ("", "services/proxy", "get"), ("", "pods/proxy", "get")}


def test_the_required_rules_are_the_roles_union() -> None:
    union = RULES_BY_ROLE["watch"] | RULES_BY_ROLE["apply"] | RULES_BY_ROLE["probe"]
    assert union == REQUIRED_RULES


@pytest.mark.parametrize("tree", TREES)
def test_the_status_service_may_only_review_callers(tree: str) -> None:
    assert _granted(find(tree, "ClusterRole", "raybus-status")) == set(STATUS_RULES)
    deployment = find(tree, "Deployment", "raybus-status")
    assert "--auth" in container(deployment, "status")["args"]


BOUND = frozenset({*(component_name(role) for role in WATCHER_ROLES), "raybus-status"})


@pytest.mark.parametrize("tree", TREES)
def test_only_the_watcher_roles_and_the_status_service_are_bound(tree: str) -> None:
    roles = {o["metadata"]["name"]: o for o in render(tree) if o["kind"] in {"Role", "ClusterRole"}}
    bindings = [o for o in render(tree) if o["kind"] in {"RoleBinding", "ClusterRoleBinding"}]
    lease = component_name("watch") + NAMESPACE_ROLE_SUFFIX
    assert set(roles) == {*BOUND, lease}
    assert len(bindings) == len(roles)
    for binding in bindings:
        name = binding["roleRef"]["name"]
        assert name == binding["metadata"]["name"]
        assert binding["roleRef"]["kind"] == roles[name]["kind"]
        subject = component_name("watch") if name == lease else name
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": subject, "namespace": "raybus-system"}]


@pytest.mark.parametrize("tree", TREES)
def test_only_the_watcher_roles_and_the_status_service_mount_an_api_token(tree: str) -> None:
    for obj in render(tree):
        if obj["kind"] == "ServiceAccount" and obj["metadata"]["name"] not in BOUND:
            assert obj.get("automountServiceAccountToken") is False, obj["metadata"]["name"]
        if obj["kind"] in {"Deployment", "StatefulSet", "Job"}:
            pod = obj["spec"]["template"]["spec"]
            mounts = obj["metadata"]["name"] in BOUND
            assert pod["automountServiceAccountToken"] is mounts, obj["metadata"]["name"]
            if mounts:
                assert pod["serviceAccountName"] == obj["metadata"]["name"]


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("role", WATCHER_ROLES)
def test_each_watcher_deployment_runs_its_role_only(tree: str, role: WatcherRole) -> None:
    """Its ServiceAccount (bound to its rules) is its own, so a Deployment must run no other role: it runs
    the role's own command, which takes no ``--roles``."""
    item = container(find(tree, "Deployment", component_name(role)), ROLE_COMMANDS[role])
    assert item["args"][0] == ROLE_COMMANDS[role]
    assert not [a for a in item["args"] if a.startswith("--roles")]
    assert "--worker-id=$(POD_NAME)" in item["args"]
    env = {e["name"]: e for e in item["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_the_role_manifests_are_generated_from_the_authorization_table() -> None:
    assert stale_files(DEPLOY) == [], "run `raybus rbac`"


def test_every_write_granted_is_a_row_of_the_authorization_table() -> None:
    """Apart from the autoscaler Role's grants, finalizers, the proxies and the Lease, a write permission
    exists only because some custom-resource kind's reconcile emits that command."""
    rows = set()
    for kind, verb in allowed_pairs():
        if kind == DASHBOARD_KIND and verb in {"submit_ray_job", "stop_ray_job", "put_serve_config"}:
            continue  # dashboard calls go through services/proxy
        call = plan_call(sample_command(kind, verb), now=datetime(2000, 1, 1, tzinfo=UTC), generate=lambda _: "")
        rows.add(rule_for(call.method, call.path, call.query))
    writes = {rule for rule in REQUIRED_RULES if rule[2] in WRITE_VERBS}
    unexplained = {rule for rule in writes - rows - GRANTED_RULES if not rule[1].endswith(("/finalizers", "/proxy"))}
    assert unexplained == set()


def test_secrets_are_never_patched_or_deleted() -> None:
    secrets = {verb for group, resource, verb in REQUIRED_RULES if (group, resource) == ("", "secrets")}
    assert secrets == {"create", "get", "list", "watch"}
