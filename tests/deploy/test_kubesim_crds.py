"""The generated CRDs, applied to kubesim through the official client, accept every ray.io object of
KubeRay's samples, and the API server fills in the CRD defaults (kubesim checks schemas and applies
defaults; it does not evaluate CEL rules, which ``tests/unit/schema/test_crds.py`` compares with
KubeRay's).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from schema.crd import generate_crds
from tests.fixtures.kubesim import KubeSimHandle, start_kubesim
from tests.helpers import ray_samples

PLURALS = {crd["spec"]["names"]["kind"]: crd["spec"]["names"]["plural"] for crd in generate_crds().values()}


def _samples() -> list[Any]:
    return [pytest.param(objects, id=stem) for stem, objects in ray_samples()]


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSimHandle]:
    """A private kubesim with no CRDs: the test installs them the way a user would."""
    handle = start_kubesim(workdir=tmp_path_factory.mktemp("kubesim-crds"))
    try:
        extensions = client.ApiextensionsV1Api(handle.api_client)
        for path in sorted((Path(__file__).resolve().parents[2] / "deploy" / "crds").glob("ray.io_*.yaml")):
            extensions.create_custom_resource_definition(yaml.safe_load(path.read_text()))
        yield handle
    finally:
        handle.close()


def _assert_kept(sent: Any, stored: Any, path: str) -> None:
    """Nothing the sample set was pruned or changed by the API server (defaults may be added)."""
    if isinstance(sent, dict):
        for key, value in sent.items():
            assert key in stored, f"{path}.{key} was pruned"
            _assert_kept(value, stored[key], f"{path}.{key}")
    elif isinstance(sent, list):
        assert len(sent) == len(stored), path
        for index, (a, b) in enumerate(zip(sent, stored, strict=True)):
            _assert_kept(a, b, f"{path}[{index}]")
    else:
        assert sent == stored, path


def _namespace(kube: KubeSimHandle) -> str:
    name = f"samples-{secrets.token_hex(4)}"
    client.CoreV1Api(kube.api_client).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def test_crds_are_served(kube: KubeSimHandle) -> None:
    resources = client.CustomObjectsApi(kube.api_client).get_api_resources("ray.io", "v1")
    assert sorted(r.name for r in resources.resources if "/" not in r.name) == sorted(PLURALS.values())
    legacy = client.CustomObjectsApi(kube.api_client).get_api_resources("ray.io", "v1alpha1")
    assert sorted(r.name for r in legacy.resources if "/" not in r.name) == ["rayclusters", "rayjobs", "rayservices"]


@pytest.mark.parametrize("objects", _samples())
def test_sample_is_accepted(kube: KubeSimHandle, objects: list[dict[str, Any]]) -> None:
    api = client.CustomObjectsApi(kube.api_client)
    namespace = _namespace(kube)
    for obj in objects:
        group, version = obj["apiVersion"].split("/")
        created: Any = api.create_namespaced_custom_object(group, version, namespace, PLURALS[obj["kind"]], obj)
        assert created["metadata"]["uid"]
        _assert_kept(obj["spec"], created["spec"], "spec")


def test_defaults_are_applied(kube: KubeSimHandle) -> None:
    api = client.CustomObjectsApi(kube.api_client)
    namespace = _namespace(kube)
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "defaults"},
        "spec": {
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "ray-head", "image": "ray"}]}}},
            "workerGroupSpecs": [
                {"groupName": "g", "template": {"spec": {"containers": [{"name": "w", "image": "ray"}]}}}
            ],
        },
    }
    created: Any = api.create_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", cluster)
    group = created["spec"]["workerGroupSpecs"][0]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"], group["numOfHosts"]) == (0, 0, 2147483647, 1)
    job = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "defaults"},
        "spec": {"entrypoint": "python -c 'print(1)'", "clusterSelector": {"ray.io/cluster": "defaults"}},
    }
    created = api.create_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", job)
    assert created["spec"]["submissionMode"] == "K8sJobMode"
    assert created["spec"]["backoffLimit"] == 0


def test_invalid_object_is_rejected(kube: KubeSimHandle) -> None:
    api = client.CustomObjectsApi(kube.api_client)
    namespace = _namespace(kube)
    bad = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "bad"},
        "spec": {"headGroupSpec": {"template": {}}, "upgradeStrategy": {"type": "Rolling"}},
    }
    with pytest.raises(client.ApiException) as caught:
        api.create_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", bad)
    assert caught.value.status == 422
