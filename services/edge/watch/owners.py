"""The owners of a child whose deletion the watch reports, and their current state on the API server.

Informers of different resources deliver independently: when a custom resource is deleted, the garbage
collector's deletions of its children (later on the API server) can reach the projection before the
custom resource's own DELETE. Projected in that order, a snapshot shows the parent alive and its
children gone, and reconcile creates them again. So before projecting a child's deletion whose owner
it still holds alive, the projection reads the owner from the API server (:class:`OwnerReader`) and, if
it is gone or going, projects that first.

Not here: the ordering itself (``projection``), the list call (``kubeapi``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from services.edge.kubeapi import KubeApi
from services.edge.ownerrefs import Owner, custom_owners
from services.edge.resources import ResourceType
from services.edge.watch.informer import Change, decode_page


@dataclass(frozen=True, slots=True)
class Current:
    """What the API server answered: the object of that name (None: none), and its resourceVersion
    at the time of the answer (every change up to it is reflected)."""

    change: Change | None
    resource_version: str


OwnerReader = Callable[[ResourceType, str, str], Awaitable[Current]]
"""Reads ``resource`` ``namespace``/``name`` from the API server."""


def deleting(obj: dict[str, Any]) -> bool:
    """Whether the object carries a ``deletionTimestamp``."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def owners_of_going(change: Change) -> list[Owner]:
    """The custom resources owning ``change``'s object when the change deletes it (or starts to)."""
    if change.type != "DELETED" and not deleting(change.obj):
        return []
    return custom_owners(change.obj)


def owner_request(resource: ResourceType, namespace: str, name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The path and query of the list by name that reads one owner (its RBAC verb is ``list``)."""
    return resource.collection_path(namespace), (("fieldSelector", f"metadata.name={name}"),)


def api_owner_reader(api: KubeApi) -> OwnerReader:
    """An :data:`OwnerReader` over the watcher's API adapter: a list by name, whose resourceVersion is
    the server's current one (a GET would only tell the object's)."""

    async def read(resource: ResourceType, namespace: str, name: str) -> Current:
        path, query = owner_request(resource, namespace, name)
        response = await api.arequest("GET", path, query=query)
        items, resource_version, _ = decode_page(resource, response.data)
        return Current(change=items[0] if items else None, resource_version=resource_version)

    return read
