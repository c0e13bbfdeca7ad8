"""Pod bindings (there is no scheduler): ``pods/<name>/binding`` and ``namespaces/<ns>/bindings``, the node set
only that way, and graceful deletion of Pods bound to a registered Node."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.fixtures.kubesim import KubeSimHandle
from tests.kubeobjects import error_body, unread


def _pod(core: client.CoreV1Api, namespace: str, name: str) -> None:
    body = {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    core.create_namespaced_pod(namespace, body)  # type: ignore[arg-type]


def _binding(pod: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def _scheduled(pod: Any) -> str | None:
    return next((c.status for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)


def _node(pod: client.V1Pod) -> str | None:
    assert pod.spec is not None
    return pod.spec.node_name


@pytest.fixture
def core(kubesim_server: KubeSimHandle) -> client.CoreV1Api:
    return client.CoreV1Api(kubesim_server.api_client)


@pytest.fixture
def node(core: client.CoreV1Api) -> Iterator[str]:
    """A registered Node, as a kubelet registers its own."""
    name = f"node-{secrets.token_hex(3)}"
    core.create_node({"metadata": {"name": name}})  # type: ignore[arg-type]
    yield name
    core.delete_node(name)


def test_a_binding_subresource_sets_the_node_and_pod_scheduled(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    _pod(core, kubesim_namespace, "p")

    answer = unread(
        core.create_namespaced_pod_binding("p", kubesim_namespace, _binding("p", "node-a"), _preload_content=False)  # type: ignore[arg-type]
    )

    assert answer.status == 201
    assert json.loads(answer.data)["status"] == "Success"
    bound = core.read_namespaced_pod("p", kubesim_namespace)
    assert _node(bound) == "node-a"
    assert _scheduled(bound) == "True"


def test_the_bindings_resource_binds_the_pod_it_names(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    _pod(core, kubesim_namespace, "p")

    core.create_namespaced_binding(kubesim_namespace, _binding("p", "node-b"), _preload_content=False)  # type: ignore[arg-type]

    assert _node(core.read_namespaced_pod("p", kubesim_namespace)) == "node-b"


def test_a_bound_pod_cannot_be_bound_again_nor_moved_by_an_update(
    core: client.CoreV1Api, kubesim_namespace: str
) -> None:
    _pod(core, kubesim_namespace, "p")
    core.create_namespaced_binding(kubesim_namespace, _binding("p", "node-a"), _preload_content=False)  # type: ignore[arg-type]

    with pytest.raises(client.ApiException) as again:
        core.create_namespaced_binding(kubesim_namespace, _binding("p", "node-b"), _preload_content=False)  # type: ignore[arg-type]
    assert again.value.status == 409
    assert 'is already assigned to node "node-a"' in error_body(again.value)["message"]

    with pytest.raises(client.ApiException) as moved:
        core.patch_namespaced_pod("p", kubesim_namespace, {"spec": {"nodeName": "node-b"}})
    assert moved.value.status == 422
    assert "pod updates may not change fields" in error_body(moved.value)["message"]


def test_binding_a_missing_pod_is_not_found(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    with pytest.raises(client.ApiException) as missing:
        core.create_namespaced_binding(kubesim_namespace, _binding("ghost", "node-a"), _preload_content=False)  # type: ignore[arg-type]
    assert missing.value.status == 404


def test_an_update_cannot_set_the_node_of_an_unbound_pod(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    _pod(core, kubesim_namespace, "p")

    with pytest.raises(client.ApiException) as refused:
        core.patch_namespaced_pod("p", kubesim_namespace, {"spec": {"nodeName": "node-a"}})

    assert refused.value.status == 422


def test_a_pod_bound_to_a_registered_node_waits_for_its_kubelet(
    core: client.CoreV1Api, kubesim_namespace: str, node: str
) -> None:
    _pod(core, kubesim_namespace, "p")
    core.create_namespaced_binding(kubesim_namespace, _binding("p", node), _preload_content=False)  # type: ignore[arg-type]

    core.delete_namespaced_pod("p", kubesim_namespace)
    terminating = core.read_namespaced_pod("p", kubesim_namespace)
    assert terminating.metadata is not None
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 30

    core.delete_namespaced_pod("p", kubesim_namespace, grace_period_seconds=0)  # what the kubelet sends
    with pytest.raises(client.ApiException) as gone:
        core.read_namespaced_pod("p", kubesim_namespace)
    assert gone.value.status == 404


def test_a_pod_bound_to_a_node_nobody_registered_goes_at_once(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    _pod(core, kubesim_namespace, "p")
    core.create_namespaced_binding(kubesim_namespace, _binding("p", "unregistered"), _preload_content=False)  # type: ignore[arg-type]

    core.delete_namespaced_pod("p", kubesim_namespace)

    with pytest.raises(client.ApiException) as gone:
        core.read_namespaced_pod("p", kubesim_namespace)
    assert gone.value.status == 404
