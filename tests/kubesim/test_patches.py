"""Merge, JSON and strategic merge patches, and resourceVersion preconditions carried by patches."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.fixtures.kubesim import KubeSimHandle
from tests.kubeobjects import error_body

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
SMP = "application/strategic-merge-patch+json"


@pytest.fixture
def core(kubesim_server: KubeSimHandle) -> client.CoreV1Api:
    return client.CoreV1Api(kubesim_server.api_client)


def _pod_body(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"a": "1", "b": "2"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "img:1",
                    "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
                    "ports": [{"containerPort": 80, "name": "http"}],
                    "volumeMounts": [{"name": "v", "mountPath": "/data"}],
                },
                {"name": "side", "image": "img:1"},
            ],
            "volumes": [{"name": "v", "emptyDir": {}}],
        },
    }


def test_merge_patch_sets_and_removes_keys(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a"}, "data": {"x": "1", "y": "2"}})  # type: ignore[arg-type]
    patched = core.patch_namespaced_config_map(
        "a", kubesim_namespace, {"data": {"x": None, "z": "3"}}, _content_type=MERGE
    )
    assert patched.data == {"y": "2", "z": "3"}


def test_merge_patch_replaces_lists(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_pod(kubesim_namespace, _pod_body("p"))  # type: ignore[arg-type]
    patch = {"spec": {"containers": [{"name": "main", "image": "img:2"}]}}
    patched = core.patch_namespaced_pod("p", kubesim_namespace, patch, _content_type=MERGE)
    assert patched.spec is not None
    assert [c.name for c in patched.spec.containers] == ["main"]


def test_json_patch_operations(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a"}, "data": {"x": "1"}})  # type: ignore[arg-type]
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": "/data/y", "value": "2"},
        {"op": "replace", "path": "/data/x", "value": "10"},
        {"op": "copy", "from": "/data/y", "path": "/data/z"},
        {"op": "move", "from": "/data/z", "path": "/data/w"},
        {"op": "add", "path": "/metadata/labels", "value": {"k~/": "v"}},
        {"op": "test", "path": "/metadata/labels/k~0~1", "value": "v"},
        {"op": "remove", "path": "/metadata/labels"},
    ]
    patched = core.patch_namespaced_config_map("a", kubesim_namespace, ops)
    assert patched.data == {"x": "10", "y": "2", "w": "2"}
    assert patched.metadata is not None
    assert patched.metadata.labels is None


@pytest.mark.parametrize(
    "ops",
    [
        pytest.param([{"op": "test", "path": "/data/x", "value": "nope"}], id="failed-test"),
        pytest.param([{"op": "remove", "path": "/data/missing"}], id="remove-missing"),
        pytest.param([{"op": "replace", "path": "/nothere/x", "value": 1}], id="replace-missing-parent"),
    ],
)
def test_failing_json_patch_is_422(core: client.CoreV1Api, kubesim_namespace: str, ops: list[dict[str, Any]]) -> None:
    core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a"}, "data": {"x": "1"}})  # type: ignore[arg-type]
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_config_map("a", kubesim_namespace, ops)
    assert err.value.status == 422
    assert error_body(err.value)["reason"] == "Invalid"


def test_strategic_merge_merges_containers_env_ports_and_mounts(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_pod(kubesim_namespace, _pod_body("p"))  # type: ignore[arg-type]
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "img:2",
                    "env": [{"name": "Y", "value": "20"}, {"name": "Z", "value": "3"}],
                    "ports": [{"containerPort": 81, "name": "alt"}],
                    "volumeMounts": [{"name": "w", "mountPath": "/more"}],
                }
            ]
        }
    }
    pod = core.patch_namespaced_pod("p", kubesim_namespace, patch)
    assert pod.spec is not None
    main = pod.spec.containers[0]
    assert main.env is not None and main.ports is not None and main.volume_mounts is not None
    assert [c.name for c in pod.spec.containers] == ["main", "side"]
    assert main.image == "img:2"
    assert [(e.name, e.value) for e in main.env] == [("X", "1"), ("Y", "20"), ("Z", "3")]
    assert [p.container_port for p in main.ports] == [80, 81]
    assert [m.mount_path for m in main.volume_mounts] == ["/data", "/more"]


def test_strategic_merge_delete_directive(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_pod(kubesim_namespace, _pod_body("p"))  # type: ignore[arg-type]
    patch = {"spec": {"containers": [{"name": "main", "env": [{"name": "X", "$patch": "delete"}]}]}}
    pod = core.patch_namespaced_pod("p", kubesim_namespace, patch)
    assert pod.spec is not None and pod.spec.containers[0].env is not None
    assert [e.name for e in pod.spec.containers[0].env] == ["Y"]


def test_strategic_merge_replace_directive(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_pod(kubesim_namespace, _pod_body("p"))  # type: ignore[arg-type]
    patch = {"metadata": {"labels": {"$patch": "replace", "only": "this"}}}
    pod = core.patch_namespaced_pod("p", kubesim_namespace, patch)
    assert pod.metadata is not None
    assert pod.metadata.labels == {"only": "this"}


def test_strategic_merge_service_ports_by_port(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    body = {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "tls"}]}}
    core.create_namespaced_service(kubesim_namespace, body)  # type: ignore[arg-type]
    svc = core.patch_namespaced_service(
        "s", kubesim_namespace, {"spec": {"ports": [{"port": 443, "targetPort": 8443}]}}
    )
    assert svc.spec is not None and svc.spec.ports is not None
    assert [(p.port, p.target_port) for p in svc.spec.ports] == [(80, 80), (443, 8443)]


def test_strategic_merge_pod_conditions_by_type(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_pod(kubesim_namespace, _pod_body("p"))  # type: ignore[arg-type]
    first = {
        "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}
    }
    core.patch_namespaced_pod_status("p", kubesim_namespace, first)
    pod = core.patch_namespaced_pod_status(
        "p", kubesim_namespace, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    assert pod.status is not None and pod.status.conditions is not None
    assert [(c.type, c.status) for c in pod.status.conditions] == [("Ready", "True"), ("PodScheduled", "True")]


def test_finalizers_merge_as_a_set(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a", "finalizers": ["x/one"]}})  # type: ignore[arg-type]
    cm = core.patch_namespaced_config_map("a", kubesim_namespace, {"metadata": {"finalizers": ["x/two"]}})
    assert cm.metadata is not None
    assert cm.metadata.finalizers == ["x/one", "x/two"]
    core.patch_namespaced_config_map("a", kubesim_namespace, {"metadata": {"finalizers": None}}, _content_type=MERGE)


@pytest.mark.parametrize("content_type", [MERGE, SMP])
def test_patch_with_stale_resource_version_is_409(
    core: client.CoreV1Api, kubesim_namespace: str, content_type: str
) -> None:
    cm = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a"}, "data": {"x": "1"}})  # type: ignore[arg-type]
    core.patch_namespaced_config_map("a", kubesim_namespace, {"data": {"x": "2"}}, _content_type=content_type)
    assert cm.metadata is not None
    stale = {"metadata": {"resourceVersion": cm.metadata.resource_version}, "data": {"x": "3"}}
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_config_map("a", kubesim_namespace, stale, _content_type=content_type)
    assert err.value.status == 409
    assert error_body(err.value)["reason"] == "Conflict"


def test_patch_with_current_resource_version_succeeds(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    cm = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a"}, "data": {"x": "1"}})  # type: ignore[arg-type]
    assert cm.metadata is not None
    current = {"metadata": {"resourceVersion": cm.metadata.resource_version}, "data": {"x": "3"}}
    assert core.patch_namespaced_config_map("a", kubesim_namespace, current, _content_type=MERGE).data == {"x": "3"}


def test_patch_missing_object_is_404(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_config_map("nope", kubesim_namespace, {"data": {}}, _content_type=MERGE)
    assert err.value.status == 404
