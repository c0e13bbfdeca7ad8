"""Sending rendered manifests to the real API server through the dynamic client, collecting refusals."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubernetes import dynamic


def submit(resources: dynamic.DynamicClient, objects: Iterable[dict[str, Any]], *, dry_run: bool) -> list[str]:
    """Create each object (only as a server-side dry run, ``dryRun=All``, with ``dry_run``) and return the
    refusals, one line each naming the object: a kind not served, or the API server's answer."""
    refused = []
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            resource = resources.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        except dynamic.exceptions.ResourceNotFoundError:
            refused.append(f"{name}: {obj['apiVersion']} {obj['kind']} is not served")
            continue
        namespace = obj["metadata"].get("namespace") if resource.namespaced else None
        try:
            resource.create(body=obj, namespace=namespace, **({"dry_run": "All"} if dry_run else {}))
        except dynamic.exceptions.DynamicApiError as exc:
            refused.append(f"{name}: {exc.status} {exc.summary()}")  # type: ignore[no-untyped-call]
    return refused
