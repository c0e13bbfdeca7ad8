"""Reading what the API server returns through the official client, whose models declare every field
optional, even those the server always sets on a stored object: each function asserts that it is set."""

from __future__ import annotations

import json
from typing import Any, Protocol

import urllib3
from kubernetes import client


class Stored(Protocol):
    """Any of the client's models of a stored object (a Pod, a Service, a Namespace, ...)."""

    @property
    def metadata(self) -> client.V1ObjectMeta | None: ...


class Listed(Protocol):
    """A stored object or a list: what carries a resourceVersion."""

    @property
    def metadata(self) -> client.V1ObjectMeta | client.V1ListMeta | None: ...


def meta(obj: Stored) -> client.V1ObjectMeta:
    """The object's metadata."""
    assert obj.metadata is not None
    return obj.metadata


def name_of(obj: Stored) -> str:
    """The object's name."""
    name = meta(obj).name
    assert name is not None
    return name


def uid_of(obj: Stored) -> str:
    """The uid the API server gave the object."""
    uid = meta(obj).uid
    assert uid is not None
    return uid


def version_of(obj: Listed) -> str:
    """The resourceVersion of an object or a list."""
    assert obj.metadata is not None and obj.metadata.resource_version is not None
    return obj.metadata.resource_version


def unread(answer: object) -> urllib3.BaseHTTPResponse:
    """The response itself, which the client returns unread for ``_preload_content=False`` (whatever it
    declares)."""
    assert isinstance(answer, urllib3.BaseHTTPResponse)
    return answer


def error_body(exc: client.ApiException) -> dict[str, Any]:
    """The Status object of a refused request."""
    assert exc.body is not None
    body: dict[str, Any] = json.loads(exc.body)
    return body
