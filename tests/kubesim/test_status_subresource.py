"""Status subresource semantics: the main endpoint keeps status, ``/status`` changes only status."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.fixtures.kubesim import KubeSimHandle


@pytest.fixture
def core(kubesim_server: KubeSimHandle) -> client.CoreV1Api:
    return client.CoreV1Api(kubesim_server.api_client)


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def test_status_in_create_body_is_ignored(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    pod = core.create_namespaced_pod(kubesim_namespace, {**_pod("p"), "status": {"phase": "Running"}})  # type: ignore[arg-type]
    assert pod.status is not None
    assert pod.status.phase == "Pending"


def test_main_endpoint_ignores_status_changes(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_pod(kubesim_namespace, _pod("p"))  # type: ignore[arg-type]
    pod = core.patch_namespaced_pod(
        "p", kubesim_namespace, {"status": {"phase": "Running"}, "metadata": {"labels": {"a": "b"}}}
    )
    assert pod.status is not None and pod.metadata is not None
    assert pod.status.phase == "Pending"
    assert pod.metadata.labels == {"a": "b"}


def test_status_endpoint_changes_only_status(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_pod(kubesim_namespace, _pod("p"))  # type: ignore[arg-type]
    patch = {"status": {"phase": "Running"}, "metadata": {"labels": {"a": "b"}}, "spec": {"activeDeadlineSeconds": 3}}
    pod = core.patch_namespaced_pod_status("p", kubesim_namespace, patch)
    assert pod.status is not None and pod.metadata is not None and pod.spec is not None
    assert pod.status.phase == "Running"
    assert pod.metadata.labels is None
    assert pod.spec.active_deadline_seconds is None
    assert pod.metadata.generation == 1


def test_replace_status_with_stale_resource_version_is_409(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    pod = core.create_namespaced_pod(kubesim_namespace, _pod("p"))  # type: ignore[arg-type]
    core.patch_namespaced_pod("p", kubesim_namespace, {"metadata": {"labels": {"a": "b"}}})
    assert pod.status is not None
    pod.status.phase = "Running"
    with pytest.raises(client.ApiException) as err:
        core.replace_namespaced_pod_status("p", kubesim_namespace, pod)
    assert err.value.status == 409


def test_custom_object_status_subresource(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    custom = client.CustomObjectsApi(kubesim_server.api_client)
    ext = client.ApiextensionsV1Api(kubesim_server.api_client)
    group = f"{kubesim_namespace}.status.test"
    schema = {
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
            },
        }
    }
    crd = {
        "metadata": {"name": f"things.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": "Thing", "plural": "things"},
            "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": True, "storage": True, "schema": schema, "subresources": {"status": {}}}
            ],
        },
    }
    ext.create_custom_resource_definition(crd)  # type: ignore[arg-type]
    try:
        body = {"apiVersion": f"{group}/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": {"size": 1}}
        created: Any = custom.create_namespaced_custom_object(group, "v1", kubesim_namespace, "things", body)
        created["status"] = {"phase": "Ready"}
        created["spec"]["size"] = 2
        via_status: Any = custom.replace_namespaced_custom_object_status(
            group, "v1", kubesim_namespace, "things", "t", created
        )
        via_main: Any = custom.patch_namespaced_custom_object(
            group, "v1", kubesim_namespace, "things", "t", {"status": {"phase": "Gone"}, "spec": {"size": 3}}
        )
        assert via_status["status"] == {"phase": "Ready"}
        assert via_status["spec"] == {"size": 1}
        assert via_status["metadata"]["generation"] == 1
        assert via_main["status"] == {"phase": "Ready"}
        assert via_main["spec"] == {"size": 3}
        assert via_main["metadata"]["generation"] == 2
    finally:
        ext.delete_custom_resource_definition(f"things.{group}")
