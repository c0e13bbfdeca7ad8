"""Every manifest of ``deploy/`` (the kustomize base and each overlay, rendered as tests/deploy renders
them) is accepted by a real API server in a server-side dry run: admission, validation and RBAC's
escalation checks all run, nothing is stored. Namespaces and CRDs are created for real first, since the
objects that live in them or are of their kinds cannot be checked without them."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, dynamic

from tests.deploy.render import TREES, render
from tests.realkube.crds import ensure_crds
from tests.realkube.submit import submit

# Created for real, in this order, before the rest is dry-run.
PREREQUISITES = ("Namespace", "CustomResourceDefinition")


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
    refused = submit(resources, [o for o in objects if o["kind"] not in PREREQUISITES], dry_run=True)
    assert not refused, "\n".join(refused)
    assert len(objects) > len(PREREQUISITES)
