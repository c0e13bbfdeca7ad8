"""The watcher's RBAC needs, derived from its request planners."""

from __future__ import annotations

import pytest

from schema.keys import KEY_KINDS
from services.edge.apply.authorize import ALLOWED, EVENT_KIND, GRANTED_RULES
from services.edge.permissions import (
    NAMESPACE_RULES_BY_ROLE,
    REQUIRED_RULES,
    RULES_BY_ROLE,
    as_named_policy_rules,
    as_policy_rules,
    named_rule_for,
    rule_for,
)
from services.edge.watch.election import LEASE_NAME
from services.reconciler.raycluster.autoscaler_rbac import role
from services.reconciler.raycluster.model import decode_view


@pytest.mark.parametrize(
    ("method", "path", "query", "rule"),
    [
        pytest.param("GET", "/api/v1/namespaces/ns/pods", (), ("", "pods", "list"), id="list"),
        pytest.param("GET", "/api/v1/pods", (("watch", "true"),), ("", "pods", "watch"), id="watch-cluster-wide"),
        pytest.param("GET", "/api/v1/namespaces/ns/secrets/s", (), ("", "secrets", "get"), id="get"),
        pytest.param("POST", "/apis/ray.io/v1/namespaces/ns/rayjobs", (), ("ray.io", "rayjobs", "create"), id="create"),
        pytest.param(
            "PATCH",
            "/apis/ray.io/v1/namespaces/ns/rayjobs/rj/status",
            (),
            ("ray.io", "rayjobs/status", "patch"),
            id="status",
        ),
        pytest.param("DELETE", "/api/v1/namespaces/ns/pods/p", (), ("", "pods", "delete"), id="delete"),
        pytest.param("DELETE", "/api/v1/namespaces/ns/pods", (), ("", "pods", "deletecollection"), id="collection"),
        pytest.param(
            "POST",
            "/api/v1/namespaces/ns/services/svc:8265/proxy/api/jobs/",
            (),
            ("", "services/proxy", "create"),
            id="service-proxy",
        ),
    ],
)
def test_rule_for(method: str, path: str, query: tuple[tuple[str, str], ...], rule: tuple[str, str, str]) -> None:
    assert rule_for(method, path, query) == rule


@pytest.mark.parametrize(
    ("method", "path", "rule"),
    [
        pytest.param("GET", "/api/v1/namespaces/ns/secrets/s", ("", "secrets", "get", "s"), id="get"),
        pytest.param(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
            ("coordination.k8s.io", "leases", "update", "l"),
            id="update",
        ),
        pytest.param(
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases",
            ("coordination.k8s.io", "leases", "create", ""),
            id="create-has-no-name",
        ),
        pytest.param(
            "PATCH",
            "/apis/ray.io/v1/namespaces/ns/rayjobs/rj/status",
            ("ray.io", "rayjobs/status", "patch", "rj"),
            id="subresource",
        ),
    ],
)
def test_named_rule_for(method: str, path: str, rule: tuple[str, str, str, str]) -> None:
    assert named_rule_for(method, path) == rule


def test_rule_for_rejects_non_resource_paths() -> None:
    with pytest.raises(ValueError, match="not a resource path"):
        rule_for("GET", "/healthz")


def test_required_rules_cover_every_request_kind() -> None:
    expected = {
        ("ray.io", "rayclusters", "watch"),
        ("ray.io", "rayjobs/status", "patch"),
        ("ray.io", "rayjobs/finalizers", "update"),
        ("", "pods", "deletecollection"),
        ("", "events", "create"),
        ("", "secrets", "get"),
        ("", "services/proxy", "get"),
        ("", "services/proxy", "create"),
        ("", "services/proxy", "update"),
        ("", "pods/proxy", "get"),
        ("discovery.k8s.io", "endpointslices", "watch"),
        ("gateway.networking.k8s.io", "httproutes", "create"),
    }
    assert expected <= REQUIRED_RULES
    assert ("discovery.k8s.io", "endpointslices", "create") not in REQUIRED_RULES
    assert ("", "pods/proxy", "create") not in REQUIRED_RULES
    assert not {r for r in REQUIRED_RULES if r[2] == "update" and not r[1].endswith(("/finalizers", "/proxy"))}


def test_the_autoscaler_role_grants_only_what_the_watcher_holds() -> None:
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
        "spec": {"headGroupSpec": {"template": {"spec": {"containers": []}}}},
    }
    granted = {
        (group, resource, verb)
        for rule in role(decode_view(cluster))["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == GRANTED_RULES
    assert granted <= RULES_BY_ROLE["apply"]  # the applier creates it


def test_each_role_holds_what_its_requests_need() -> None:
    assert {
        ("ray.io", "rayclusters", "watch"),
        ("ray.io", "rayjobs", "list"),  # also the owner reads: a list by name
        ("discovery.k8s.io", "endpointslices", "watch"),
    } <= RULES_BY_ROLE["watch"]
    assert {
        ("ray.io", "rayjobs/status", "patch"),
        ("ray.io", "rayjobs/finalizers", "update"),
        ("", "pods", "deletecollection"),
        ("", "events", "create"),
        ("", "secrets", "get"),  # the dashboard token
        ("", "services/proxy", "create"),
        ("", "services/proxy", "update"),
        ("", "services/proxy", "get"),  # a timed-out Serve config PUT is confirmed by a GET
        *(("ray.io", plural, "get") for plural in ("rayclusters", "rayjobs", "rayservices", "raycronjobs")),
    } <= RULES_BY_ROLE["apply"]
    assert RULES_BY_ROLE["probe"] == {("", "secrets", "get"), ("", "services/proxy", "get"), ("", "pods/proxy", "get")}


def test_failure_reports_write_only_rows_of_the_table() -> None:
    """A failure report's Warning Event and status condition need no permission of their own."""
    for kind in KEY_KINDS:
        assert {(EVENT_KIND, "emit_event"), (kind, "patch_status")} <= ALLOWED[kind]


def test_the_watch_side_may_only_hold_its_lease_in_its_namespace() -> None:
    by_role = dict(NAMESPACE_RULES_BY_ROLE)
    assert by_role == {
        "watch": {
            ("coordination.k8s.io", "leases", "get", LEASE_NAME),
            ("coordination.k8s.io", "leases", "update", LEASE_NAME),
            ("coordination.k8s.io", "leases", "create", ""),
        },
        "apply": set(),
        "probe": set(),
    }


def test_policy_rules_round_trip() -> None:
    expanded = {
        (group, resource, verb)
        for rule in as_policy_rules(REQUIRED_RULES)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert expanded == REQUIRED_RULES


def test_named_policy_rules_round_trip() -> None:
    rules = NAMESPACE_RULES_BY_ROLE["watch"]
    expanded = {
        (group, resource, verb, name)
        for rule in as_named_policy_rules(rules)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames", [""])
    }
    assert expanded == rules
