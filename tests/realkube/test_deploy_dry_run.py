"""Every manifest of ``deploy/`` (the kustomize base and each overlay, rendered as tests/deploy renders
them) is accepted by a real API server in a server-side dry run: admission, validation and RBAC's
escalation checks all run, nothing is stored. Namespaces and CRDs are created for real first, since the
objects that live in them or are of their kinds cannot be checked without them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, dynamic

from tests.deploy.render import TREES, render
from tests.realkube.crds import ensure_crds

# Created for real, in this order, before the rest is dry-run.
PREREQUISITES = ("Namespace", "CustomResourceDefinition")


@pytest.fixture(scope="module")
def resources(kube_admin: client.ApiClient, tmp_path_factory: pytest.TempPathFactory) -> dynamic.DynamicClient:
    """A dynamic client (its discovery cache kept in pytest's tmp, not the machine's)."""
    cache = Path(tmp_path_factory.mktemp("discovery")) / "cache.json"
    return dynamic.DynamicClient(kube_admin, cache_file=str(cache))


def _create_for_real(api: client.ApiClient, objects: tuple[dict[str, Any], ...]) -> None:
    core = client.CoreV1Api(api)
    namespaces = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    namespaces |= {o["metadata"]["namespace"] for o in objects if o["metadata"].get("namespace")}
    for name in sorted(namespaces):
        try:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    ensure_crds(api, [o for o in objects if o["kind"] == "CustomResourceDefinition"])


@pytest.mark.parametrize("tree", TREES)
def test_every_manifest_passes_a_server_side_dry_run(
    kube_admin: client.ApiClient, resources: dynamic.DynamicClient, tree: str
) -> None:
    objects = render(tree)
    _create_for_real(kube_admin, objects)
    refused = []
    for obj in objects:
        if obj["kind"] in PREREQUISITES:
            continue
        try:
            resource = resources.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        except dynamic.exceptions.ResourceNotFoundError:
            refused.append(f"{obj['kind']}/{obj['metadata']['name']}: {obj['apiVersion']} {obj['kind']} is not served")
            continue
        namespace = obj["metadata"].get("namespace") if resource.namespaced else None
        try:
            resource.create(body=obj, namespace=namespace, dry_run="All")
        except dynamic.exceptions.DynamicApiError as exc:
            refused.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.status} {exc.summary()}")
    assert not refused, "\n".join(refused)
    assert len(objects) > len(PREREQUISITES)
