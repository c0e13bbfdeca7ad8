"""The watcher's RBAC needs, derived from its request planners."""

from __future__ import annotations

import pytest

from services.reconciler.raycluster.autoscaler_rbac import role
from services.reconciler.raycluster.model import decode_view
from services.watcher.permissions import GRANTED_RULES, REQUIRED_RULES, as_policy_rules, rule_for


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
    assert granted <= REQUIRED_RULES


def test_policy_rules_round_trip() -> None:
    expanded = {
        (group, resource, verb)
        for rule in as_policy_rules()
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert expanded == REQUIRED_RULES
