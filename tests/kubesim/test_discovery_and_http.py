"""Discovery documents, server-side printing, and HTTP-level errors the client cannot produce itself."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from tests.fixtures.kubesim import KubeSimHandle


def _request(
    kube: KubeSimHandle, method: str, path: str, body: bytes = b"", content_type: str = "application/json"
) -> tuple[int, dict[str, Any]]:
    pool = kube.api_client.rest_client.pool_manager
    resp = pool.request(method, kube.url + path, body=body or None, headers={"Content-Type": content_type})
    return resp.status, json.loads(resp.data)


def test_version(kubesim_server: KubeSimHandle) -> None:
    info = client.VersionApi(kubesim_server.api_client).get_code()
    assert (info.major, info.minor) == ("1", "34")


def test_core_and_group_discovery(kubesim_server: KubeSimHandle) -> None:
    core_versions = client.CoreApi(kubesim_server.api_client).get_api_versions()
    groups = client.ApisApi(kubesim_server.api_client).get_api_versions()
    names = {g.name for g in groups.groups}
    assert core_versions.versions == ["v1"]
    assert names >= {"apps", "batch", "rbac.authorization.k8s.io", "coordination.k8s.io", "discovery.k8s.io", "ray.io"}


def test_resource_discovery_lists_verbs_subresources_and_short_names(kubesim_server: KubeSimHandle) -> None:
    resources = {r.name: r for r in client.CoreV1Api(kubesim_server.api_client).get_api_resources().resources}
    assert resources["pods"].namespaced is True
    assert resources["pods"].short_names == ["po"]
    assert "watch" in resources["pods"].verbs
    assert {"pods/status", "services/proxy", "pods/proxy"} <= set(resources)
    assert resources["namespaces"].namespaced is False


@pytest.mark.parametrize(
    ("group", "version", "plural"),
    [
        pytest.param("batch", "v1", "jobs", id="jobs"),
        pytest.param("events.k8s.io", "v1", "events", id="events"),
        pytest.param("networking.k8s.io", "v1", "ingresses", id="ingresses"),
        pytest.param("policy", "v1", "poddisruptionbudgets", id="pdb"),
        pytest.param("autoscaling", "v2", "horizontalpodautoscalers", id="hpa"),
        pytest.param("apiextensions.k8s.io", "v1", "customresourcedefinitions", id="crds"),
    ],
)
def test_builtin_groups_are_served(kubesim_server: KubeSimHandle, group: str, version: str, plural: str) -> None:
    status, body = _request(kubesim_server, "GET", f"/apis/{group}/{version}")
    assert status == 200
    assert plural in {r["name"] for r in body["resources"]}


_DEPLOYMENT_SPEC = {
    "selector": {"matchLabels": {"app": "x"}},
    "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
}


@pytest.mark.parametrize(
    ("api", "create", "extra"),
    [
        pytest.param("RbacAuthorizationV1Api", "create_namespaced_role", {}, id="role"),
        pytest.param("CoordinationV1Api", "create_namespaced_lease", {}, id="lease"),
        pytest.param("AppsV1Api", "create_namespaced_deployment", {"spec": _DEPLOYMENT_SPEC}, id="deployment"),
        pytest.param("NetworkingV1Api", "create_namespaced_network_policy", {}, id="networkpolicy"),
        pytest.param(
            "DiscoveryV1Api", "create_namespaced_endpoint_slice", {"addressType": "IPv4", "endpoints": []}, id="slice"
        ),
    ],
)
def test_builtin_kinds_store_objects(
    kubesim_server: KubeSimHandle, kubesim_namespace: str, api: str, create: str, extra: dict[str, object]
) -> None:
    body = {"metadata": {"name": "x"}, **extra}
    created = getattr(getattr(client, api)(kubesim_server.api_client), create)(kubesim_namespace, body)
    assert created.metadata.uid


def test_unknown_resource_is_404(kubesim_server: KubeSimHandle) -> None:
    status, body = _request(kubesim_server, "GET", "/apis/nothing.example.com/v1/widgets")
    assert status == 404
    assert body["kind"] == "Status"


def test_malformed_json_is_400(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    status, body = _request(kubesim_server, "POST", f"/api/v1/namespaces/{kubesim_namespace}/configmaps", b"{nope")
    assert (status, body["reason"]) == (400, "BadRequest")


def test_body_over_3_mib_is_413(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    big = json.dumps({"metadata": {"name": "big"}, "data": {"x": "y" * (3 * 1024 * 1024 + 10)}}).encode()
    status, body = _request(kubesim_server, "POST", f"/api/v1/namespaces/{kubesim_namespace}/configmaps", big)
    assert (status, body["reason"]) == (413, "RequestEntityTooLarge")


def test_unknown_patch_type_is_415(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    core = client.CoreV1Api(kubesim_server.api_client)
    core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a"}})  # type: ignore[arg-type]
    status, body = _request(
        kubesim_server, "PATCH", f"/api/v1/namespaces/{kubesim_namespace}/configmaps/a", b"{}", "text/plain"
    )
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")


def test_unsupported_verb_is_405(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    status, body = _request(kubesim_server, "POST", f"/api/v1/namespaces/{kubesim_namespace}/configmaps/a", b"{}")
    assert (status, body["reason"]) == (405, "MethodNotAllowed")


def test_server_side_apply_creates_then_merges(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    path = f"/api/v1/namespaces/{kubesim_namespace}/configmaps/applied?fieldManager=test"
    apply = "application/apply-patch+yaml"
    first, created = _request(
        kubesim_server, "PATCH", path, b"apiVersion: v1\nkind: ConfigMap\ndata: {a: '1'}\n", apply
    )
    second, merged = _request(
        kubesim_server, "PATCH", path, b"apiVersion: v1\nkind: ConfigMap\ndata: {b: '2'}\n", apply
    )
    assert (first, second) == (201, 200)
    assert merged["data"] == {"a": "1", "b": "2"}


def test_table_output_for_kubectl(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    core = client.CoreV1Api(kubesim_server.api_client)
    body = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    core.create_namespaced_pod(kubesim_namespace, body)  # type: ignore[arg-type]
    pool = kubesim_server.api_client.rest_client.pool_manager
    resp = pool.request(
        "GET",
        f"{kubesim_server.url}/api/v1/namespaces/{kubesim_namespace}/pods",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"},
    )
    table = json.loads(resp.data)
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert table["rows"][0]["cells"][:4] == ["p", "0/1", "Pending", 0]


def test_table_watch_for_kubectl_get_watch(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    core = client.CoreV1Api(kubesim_server.api_client)
    for name in ("a", "b"):
        core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": name}})  # type: ignore[arg-type]
    pool = kubesim_server.api_client.rest_client.pool_manager
    resp = pool.request(
        "GET",
        f"{kubesim_server.url}/api/v1/namespaces/{kubesim_namespace}/configmaps?watch=1&timeoutSeconds=1",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    )
    first, second = (json.loads(line) for line in resp.data.decode().splitlines())
    assert first["object"]["kind"] == "Table"
    assert [c["name"] for c in first["object"]["columnDefinitions"]] == ["Name", "Age"]
    assert second["object"]["columnDefinitions"] == []
    assert second["object"]["rows"][0]["cells"][0] == "b"
