"""Label and field selectors on lists, through the official client."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.fixtures.kubesim import KubeSimHandle
from tests.kubeobjects import name_of

PODS = {
    "a": ({"app": "ray", "tier": "head"}, "node-1"),
    "b": ({"app": "ray", "tier": "worker"}, "node-2"),
    "c": ({"app": "web"}, ""),
}
PODS_SPEC = {"containers": [{"name": "c", "image": "x"}]}


@pytest.fixture
def core(kubesim_server: KubeSimHandle) -> client.CoreV1Api:
    return client.CoreV1Api(kubesim_server.api_client)


@pytest.fixture
def pods(core: client.CoreV1Api, kubesim_namespace: str) -> str:
    for name, (labels, node) in PODS.items():
        spec: dict[str, object] = {"containers": [{"name": "c", "image": "x"}]}
        if node:
            spec["nodeName"] = node
        core.create_namespaced_pod(kubesim_namespace, {"metadata": {"name": name, "labels": labels}, "spec": spec})  # type: ignore[arg-type]
    core.patch_namespaced_pod_status("a", kubesim_namespace, {"status": {"phase": "Running"}})
    return kubesim_namespace


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("app=ray", ["a", "b"], id="equals"),
        pytest.param("app==ray", ["a", "b"], id="double-equals"),
        pytest.param("app!=ray", ["c"], id="not-equals-includes-missing"),
        pytest.param("tier in (head,worker)", ["a", "b"], id="in"),
        pytest.param("tier notin (head)", ["b", "c"], id="notin"),
        pytest.param("tier", ["a", "b"], id="exists"),
        pytest.param("!tier", ["c"], id="not-exists"),
        pytest.param("app=ray,tier=worker", ["b"], id="and"),
        pytest.param("app in (ray, web),!tier", ["c"], id="in-with-spaces-and-not-exists"),
    ],
)
def test_label_selectors(core: client.CoreV1Api, pods: str, selector: str, expected: list[str]) -> None:
    listed = core.list_namespaced_pod(pods, label_selector=selector)
    assert [name_of(p) for p in listed.items] == expected


def test_label_index_follows_relabels_and_deletes(core: client.CoreV1Api, pods: str) -> None:
    core.patch_namespaced_pod("b", pods, {"metadata": {"labels": {"app": "web", "tier": None}}})
    core.delete_namespaced_pod("a", pods, grace_period_seconds=0)
    core.create_namespaced_pod(pods, {"metadata": {"name": "d", "labels": {"app": "ray"}}, "spec": PODS_SPEC})  # type: ignore[arg-type]

    def names(selector: str, field: str | None = None) -> list[str]:
        listed = core.list_namespaced_pod(pods, label_selector=selector, field_selector=field)
        return [name_of(p) for p in listed.items]

    assert names("app=ray") == ["d"]
    assert names("app=web") == ["b", "c"]
    assert names("tier=worker") == []
    assert names("app=web", "metadata.name=c") == ["c"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("metadata.name=b", ["b"], id="name"),
        pytest.param("metadata.name!=b", ["a", "c"], id="name-not"),
        pytest.param("status.phase=Running", ["a"], id="phase"),
        pytest.param("status.phase!=Running", ["b", "c"], id="phase-not"),
        pytest.param("spec.nodeName=node-2", ["b"], id="node"),
        pytest.param("spec.nodeName=", ["c"], id="unscheduled"),
    ],
)
def test_pod_field_selectors(core: client.CoreV1Api, pods: str, selector: str, expected: list[str]) -> None:
    listed = core.list_namespaced_pod(pods, field_selector=selector)
    assert [name_of(p) for p in listed.items] == expected


def test_namespace_field_selector_across_namespaces(core: client.CoreV1Api, pods: str) -> None:
    listed = core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={pods}")
    assert sorted(name_of(p) for p in listed.items) == ["a", "b", "c"]


def test_event_involved_object_field_selector(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    for target in ("x", "y"):
        event = {
            "metadata": {"name": f"ev-{target}"},
            "involvedObject": {"kind": "Pod", "name": target, "namespace": kubesim_namespace},
            "reason": "Test",
            "message": "hello",
        }
        core.create_namespaced_event(kubesim_namespace, event)  # type: ignore[arg-type]
    listed = core.list_namespaced_event(
        kubesim_namespace, field_selector="involvedObject.name=y,involvedObject.kind=Pod"
    )
    assert [name_of(e) for e in listed.items] == ["ev-y"]


def test_unsupported_field_selector_is_400(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    with pytest.raises(client.ApiException) as err:
        core.list_namespaced_config_map(kubesim_namespace, field_selector="data.x=1")
    assert err.value.status == 400
    assert err.value.body is not None
    assert json.loads(err.value.body)["message"] == (
        '"data.x" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )


def test_malformed_label_selector_is_400(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    with pytest.raises(client.ApiException) as err:
        core.list_namespaced_config_map(kubesim_namespace, label_selector="app in (a")
    assert err.value.status == 400
