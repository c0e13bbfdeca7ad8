"""The applier's commands as Kubernetes API calls: a pure planner, outcome rules and the retry policy.

Role (lightkube's ``prepare_request`` / ``handle_response`` split): :func:`plan_call` turns one object
command into an :class:`ApiCall` (method, path, query, body, content type, and how a 404/409 answer
counts) without any I/O, so every path and body is unit-tested without a server. The Kubernetes
adapter (``kubeapi``) only sends what was planned. :func:`outcome_of_error`, :func:`is_transient`,
:func:`requested_delay` and :data:`RETRY_BACKOFF` are the policies that turn an :class:`ApiError` into a
published outcome (kopf's error taxonomy: what is done, what is dropped, what is retried, what fails for
good).

Idempotency rules (docs/architecture.md#watcher):
- create: 409 AlreadyExists → ``already_done`` (names are deterministic);
- delete: 404 → ``already_done``; 409 on a uid precondition (a newer object took the name) →
  ``already_done`` (the object the command meant is gone);
- patch / status patch with ``resource_version``: 409 Conflict → ``dropped`` (the decision saw an older
  object than the server holds: the reconciler that published it decides the key again on that outcome,
  ``services/reconciler/worker/inflight.py``); 404 → ``dropped`` (the object is gone), likewise;
- 429, 5xx and connection errors → retried with backoff, then ``failed``;
- any other 4xx → ``failed`` at once, with the API's message.

Not here: the call and error types and object paths every role uses (``services.edge.calls``), Events
(``services.edge.events``), dashboard calls (``dashboard``), threads and HTTP (``kubeapi``).
Deliberately pure: the clock and the token generator of ``raybus.io/generate`` Secrets are arguments.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final, assert_never

from schema.messages import (
    GENERATE_ANNOTATION,
    Command,
    CreateObject,
    DeleteCollection,
    DeleteObject,
    EmitEvent,
    Outcome,
    PatchObject,
    PatchStatus,
    PatchType,
    PutServeConfig,
    StopRayJob,
    SubmitRayJob,
)
from schema.ray import conventions
from services.edge.calls import ApiCall, ApiError, collection_path, object_path
from services.edge.events import event_call
from services.edge.resources import ResourceType, by_api_version_kind
from services.runtime.backoff import Backoff
from services.runtime.errors import PermanentError

PATCH_CONTENT_TYPES: Final[Mapping[PatchType, str]] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
_CUSTOM_GROUPS: Final = frozenset({conventions.GROUP, conventions.GATEWAY_GROUP})

TokenGenerator = Callable[[str], str]
"""Makes the value of a ``raybus.io/generate`` Secret key (the auth token key → a fresh token)."""


# --- planning ---------------------------------------------------------------------------------------


def resource_of(api_version: str, kind: str) -> ResourceType:
    """The table row for an object reference.

    Raises:
        PermanentError: a kind the watcher does not know how to write.
    """
    resource = by_api_version_kind(api_version, kind)
    if resource is None or not resource.writable:
        raise PermanentError(f"the applier does not write {kind} ({api_version})")
    return resource


def _with_resource_version(
    patch: dict[str, Any] | list[dict[str, Any]], patch_type: PatchType, resource_version: str
) -> dict[str, Any] | list[dict[str, Any]]:
    """Add an optimistic-concurrency precondition to a patch body."""
    if not resource_version:
        return patch
    if isinstance(patch, list):
        # Setting the version (not a "test" op, which fails with 422) makes the API server run its
        # optimistic-concurrency check on the result: a stale version is a 409 Conflict.
        pin = {"op": "replace", "path": "/metadata/resourceVersion", "value": resource_version}
        return [pin, *patch]
    metadata = dict(patch.get("metadata") or {})
    metadata["resourceVersion"] = resource_version
    return {**patch, "metadata": metadata}


def _effective_patch_type(resource: ResourceType, patch_type: PatchType) -> PatchType:
    # Custom resources do not support strategic merge patch (415); a merge patch is what it means there.
    if patch_type == "strategic" and resource.group in _CUSTOM_GROUPS:
        return "merge"
    return patch_type


def _create_body(command: CreateObject, resource: ResourceType, generate: TokenGenerator | None) -> dict[str, Any]:
    target = command.target
    body = dict(command.body)
    body.setdefault("apiVersion", resource.api_version)
    body.setdefault("kind", resource.kind)
    metadata = dict(body.get("metadata") or {})
    metadata.setdefault("name", target.name)
    if resource.namespaced:
        metadata.setdefault("namespace", target.namespace)
    body["metadata"] = metadata
    annotations = metadata.get("annotations") or {}
    wanted = annotations.get(GENERATE_ANNOTATION) if isinstance(annotations, dict) else None
    if resource.kind == "Secret" and wanted:
        if wanted != conventions.AUTH_TOKEN_SECRET_KEY:
            raise PermanentError(f"unknown {GENERATE_ANNOTATION} value {wanted!r}")
        if generate is None:
            raise PermanentError("a generated Secret needs a token generator")
        # Written as ``data`` (base64 of the token), which is what the API server stores for
        # ``stringData``: the same object on a real server, and it needs no folding by the server.
        token = base64.b64encode(generate(wanted).encode()).decode()
        body["data"] = {**(body.get("data") or {}), conventions.AUTH_TOKEN_SECRET_KEY: token}
    return body


def plan_call(command: Command, *, now: datetime, generate: TokenGenerator | None = None) -> ApiCall:
    """The API request that applies one object command.

    Args:
        command: a Kubernetes command (not a dashboard one).
        now: timestamps of an emitted Event.
        generate: fills ``raybus.io/generate`` Secrets at create time (never called otherwise).

    Returns:
        The planned call.

    Raises:
        PermanentError: a dashboard command, an unknown kind or a missing namespace.
    """
    match command:
        case CreateObject():
            return _create_call(command, generate)
        case PatchObject():
            return _patch_call(command)
        case PatchStatus():
            return _status_call(command)
        case DeleteObject():
            return _delete_call(command)
        case DeleteCollection():
            return _delete_collection_call(command)
        case EmitEvent():
            return event_call(command, now=now)
        case SubmitRayJob() | StopRayJob() | PutServeConfig():
            raise PermanentError(f"{type(command).__name__} is a dashboard command, not an API call")
        case _:
            assert_never(command)


def _create_call(command: CreateObject, generate: TokenGenerator | None) -> ApiCall:
    """A POST to the collection; an object that exists already counts as created."""
    target = command.target
    resource = resource_of(target.api_version, target.kind)
    return ApiCall(
        method="POST",
        path=collection_path(resource, target.namespace),
        body=_create_body(command, resource, generate),
        on_conflict="already_done",
    )


def _patch_call(command: PatchObject) -> ApiCall:
    """A PATCH of the object, of the type its resource takes; a guarded one is dropped on 409."""
    target = command.target
    resource = resource_of(target.api_version, target.kind)
    patch_type = _effective_patch_type(resource, command.patch_type)
    if patch_type == "json" and not isinstance(command.patch, list):
        raise PermanentError("a JSON patch must be a list of operations")
    if patch_type != "json" and isinstance(command.patch, list):
        raise PermanentError(f"a {patch_type} patch must be an object")
    return ApiCall(
        method="PATCH",
        path=object_path(resource, target.namespace, target.name),
        body=_with_resource_version(command.patch, patch_type, command.resource_version),
        content_type=PATCH_CONTENT_TYPES[patch_type],
        on_not_found="dropped",
        on_conflict="dropped" if command.resource_version else None,
    )


def _status_call(command: PatchStatus) -> ApiCall:
    """A merge patch of the status subresource (of the object where its resource has none)."""
    target = command.target
    resource = resource_of(target.api_version, target.kind)
    subresource = "status" if resource.status_subresource else ""
    return ApiCall(
        method="PATCH",
        path=object_path(resource, target.namespace, target.name, subresource),
        body=_with_resource_version({"status": command.status}, "merge", command.resource_version),
        content_type=PATCH_CONTENT_TYPES["merge"],
        on_not_found="dropped",
        on_conflict="dropped" if command.resource_version else None,
    )


def _delete_call(command: DeleteObject) -> ApiCall:
    """A DELETE with the propagation asked for, guarded by the uid: a namesake is never deleted."""
    target = command.target
    resource = resource_of(target.api_version, target.kind)
    options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if command.propagation:
        options["propagationPolicy"] = command.propagation
    if target.uid:
        options["preconditions"] = {"uid": target.uid}
    return ApiCall(
        method="DELETE",
        path=object_path(resource, target.namespace, target.name),
        body=options,
        on_not_found="already_done",
        on_conflict="already_done" if target.uid else None,
    )


def _delete_collection_call(command: DeleteCollection) -> ApiCall:
    """A DELETE of the collection by label selector; never without one."""
    resource = resource_of(command.api_version, command.kind)
    if not command.label_selector:
        raise PermanentError("refusing a deletecollection without a label selector")
    return ApiCall(
        method="DELETE",
        path=collection_path(resource, command.namespace),
        query=(("labelSelector", command.label_selector),),
        on_not_found="already_done",
    )


# --- outcomes and retries ---------------------------------------------------------------------------

RETRY_BACKOFF: Final = Backoff(base=0.1, cap=5.0, factor=3.0, retries=5)
"""Pauses before the retries of a transient failure (0.1, 0.3, 0.9, 2.7, 5 s; kopf's ``error_delays``);
then ``failed``."""
MAX_RETRY_AFTER: Final = 30.0
"""A server's ``Retry-After`` is honoured up to this many seconds."""


def is_transient(error: Exception) -> bool:
    """Worth retrying: an API error with no answer, throttled (429) or server-side (5xx)."""
    return isinstance(error, ApiError) and (error.status == 0 or error.status == 429 or error.status >= 500)


def requested_delay(error: Exception) -> float:
    """Seconds a ``Retry-After`` header asks for (honoured up to :data:`MAX_RETRY_AFTER`), else 0.

    A pure policy (lightkube's ``OnErrorHandler``), applied with :data:`RETRY_BACKOFF`: a retry waits
    the longer of the two."""
    if isinstance(error, ApiError) and error.retry_after is not None:
        return min(error.retry_after, MAX_RETRY_AFTER)
    return 0.0


def outcome_of_error(call: ApiCall, error: ApiError) -> Outcome | None:
    """The outcome an error means for this call (``already_done`` / ``dropped``), or None (a failure)."""
    if error.status == 404:
        return call.on_not_found
    if error.status == 409:
        if call.on_conflict is None:
            return None
        # A create that hits a 409 that is not AlreadyExists (e.g. "object is being deleted") is still
        # done from the command's point of view: the name is taken, the next event tells the rest.
        return call.on_conflict
    return None
