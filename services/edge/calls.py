"""API calls every role of the edge makes: the planned request, the error it may raise, object paths.

Role (lightkube's ``prepare_request`` / ``handle_response`` split): a role plans an :class:`ApiCall`
without any I/O (the applier's commands in ``apply.plan``, the watch's Lease in ``watch.election``, a
Warning Event in ``events``); the Kubernetes adapter (``kubeapi``) only sends what was planned and turns
a failed answer into an :class:`ApiError`.

Not here: what a command becomes (``apply.plan``), the retry policy (``apply.plan``), sending (``kubeapi``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from schema.messages import Outcome
from services.edge.resources import ResourceType
from services.runtime.errors import PermanentError, RaybusError

JSON: Final = "application/json"


@dataclass(frozen=True, kw_only=True)
class ApiCall:
    """One planned HTTP request to the API server.

    Attributes:
        method: HTTP method.
        path: absolute path (no host).
        query: query parameters, in order.
        body: JSON-serialisable body, or None.
        content_type: the body's content type.
        on_not_found: the outcome a 404 means, or None (a failure).
        on_conflict: the outcome a 409 means, or None (a failure).
    """

    method: str
    path: str
    query: tuple[tuple[str, str], ...] = ()
    body: Any = None
    content_type: str = JSON
    on_not_found: Outcome | None = None
    on_conflict: Outcome | None = None


class ApiError(RaybusError):
    """A failed API call with the parsed ``Status`` (status 0: no HTTP answer, e.g. connection refused)."""

    def __init__(self, status: int, reason: str = "", message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(status, reason, message)
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    def __str__(self) -> str:
        if self.status == 0:
            return f"connection error: {self.message}"
        return f"{self.status} {self.reason}: {self.message}".rstrip(": ")


def object_path(resource: ResourceType, namespace: str, name: str, subresource: str = "") -> str:
    """Path of one object (and optionally its subresource)."""
    if resource.namespaced and not namespace:
        raise PermanentError(f"{resource.kind} {name!r} needs a namespace")
    path = f"{resource.collection_path(namespace)}/{quote(name, safe='')}"
    return f"{path}/{subresource}" if subresource else path


def collection_path(resource: ResourceType, namespace: str) -> str:
    """Path of a resource's collection in ``namespace`` (a namespaced one needs it)."""
    if resource.namespaced and not namespace:
        raise PermanentError(f"{resource.kind} needs a namespace")
    return resource.collection_path(namespace)
