"""Installing CRDs on the real API server the way a user does: create, then wait until Established."""

from __future__ import annotations

from functools import partial
from typing import Any

from kubernetes import client

from tests.helpers import eventually_sync


def ensure_crds(api: client.ApiClient, crds: list[dict[str, Any]]) -> None:
    """Create the CRDs that do not exist yet and wait until every one is Established."""
    extensions = client.ApiextensionsV1Api(api)
    for crd in crds:
        try:
            extensions.create_custom_resource_definition(crd)  # type: ignore[arg-type]
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    for crd in crds:
        name = crd["metadata"]["name"]
        eventually_sync(partial(_read_established, extensions, name), timeout=60.0, message=f"CRD {name} Established")


def established(crd: client.V1CustomResourceDefinition) -> bool:
    """Whether the API server serves the CRD's kinds."""
    assert crd.status is not None
    return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))


def _read_established(extensions: client.ApiextensionsV1Api, name: str) -> bool:
    return established(extensions.read_custom_resource_definition(name))
