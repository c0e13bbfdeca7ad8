"""The real-Kubernetes tier: one control plane (etcd, kube-apiserver, kube-controller-manager of the pinned
release, see docs/real-kubernetes.md) per test session or xdist worker, driven through the official client."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config, dynamic

from realkube import ControlPlane


@pytest.fixture(scope="session")
def real_kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A running control plane; its state folder (with the programs' logs) is kept under pytest's tmp."""
    with ControlPlane(tmp_path_factory.mktemp("realkube")) as plane:
        yield plane


@pytest.fixture(scope="session")
def kube_admin(real_kube: ControlPlane) -> Iterator[client.ApiClient]:
    """An official client authenticated as cluster admin."""
    api = config.new_client_from_config(config_file=str(real_kube.kubeconfig))  # type: ignore[no-untyped-call]
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="session")
def resources(kube_admin: client.ApiClient, tmp_path_factory: pytest.TempPathFactory) -> dynamic.DynamicClient:
    """A dynamic client (its discovery cache kept in pytest's tmp, not the machine's)."""
    cache = Path(tmp_path_factory.mktemp("discovery")) / "cache.json"
    return dynamic.DynamicClient(kube_admin, cache_file=str(cache))  # type: ignore[no-untyped-call]


@pytest.fixture
def kube_namespace(kube_admin: client.ApiClient) -> Iterator[str]:
    """A fresh namespace, deleted after the test (without waiting for its contents to go)."""
    name = f"rk-{secrets.token_hex(4)}"
    core = client.CoreV1Api(kube_admin)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)
