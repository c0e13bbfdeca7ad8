"""Showing on the custom resource what the applier could not do.

A command that still fails after its retries (or a batch dead-lettered because it kept coming back
without an ack) becomes, besides its ``failed`` result: a Warning Event on the key's custom resource with
KubeRay's reason where it has one (``FailedToCreateWorkerPod``, ``FailedToDeleteHeadPod``, ...; else
``FailedTo<Verb><Kind>``), on a RayCluster the ``ReplicaFailure`` condition for the Pod failures KubeRay
marks that way (``FailedCreateWorkerPod``, ...; the next successful reconcile removes it, as KubeRay's
status step does), and the metric ``raybus_failed_commands_total``. ``kubectl describe`` then tells the
user. A failed Event is only counted and logged: an Event that cannot be written cannot report itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

import msgspec

from schema.messages import (
    Command,
    CommandBatch,
    CreateObject,
    DeleteCollection,
    DeleteObject,
    EmitEvent,
    ObjectRef,
    PatchObject,
    PatchStatus,
    PutServeConfig,
    StopRayJob,
    SubmitRayJob,
    command_target,
    command_verb,
)
from schema.ray import conventions
from schema.times import format_time
from services.edge.apply.plan import outcome_of_error, plan_call, resource_of
from services.edge.calls import ApiError, object_path
from services.edge.kubeapi import KubeApi
from services.runtime.metrics import Tally, meter

log = logging.getLogger(__name__)
_meter = meter(__name__)
_failed = Tally(
    _meter,
    "raybus_failed_commands_total",
    description="commands that failed after their retries (shown on the resource)",
)

REPLICA_FAILURE: Final = "ReplicaFailure"
MAX_MESSAGE: Final = 1000
CONDITION_ATTEMPTS: Final = 3


def _is_head(command: Command, cluster: str) -> bool:
    if isinstance(command, CreateObject):
        labels = (command.body.get("metadata") or {}).get("labels") or {}
        return labels.get(conventions.LABEL_NODE_TYPE) == conventions.NODE_HEAD
    return isinstance(command, DeleteObject) and command.target.name.startswith(f"{cluster}-head")


def failure_reasons(kind: str, cluster: str, command: Command | None) -> tuple[str, str]:
    """The Event reason for a failed ``command`` of a ``kind`` key, and the RayCluster ``ReplicaFailure``
    reason ("" when KubeRay sets none for it). ``None``: a whole batch that could not be applied."""
    match command:
        case None:
            return "FailedToApplyDecision", ""
        case CreateObject(target=ObjectRef(kind="Pod")) | DeleteObject(target=ObjectRef(kind="Pod")):
            role = "Head" if _is_head(command, cluster) else "Worker"
            verb = "Create" if isinstance(command, CreateObject) else "Delete"
            return f"FailedTo{verb}{role}Pod", f"Failed{verb}{role}Pod" if kind == "RayCluster" else ""
        case DeleteCollection(kind="Pod"):
            return "FailedToDeletePodCollection", "FailedDeleteAllPods" if kind == "RayCluster" else ""
        case CreateObject() | PatchObject() | DeleteObject():
            verb = {CreateObject: "Create", PatchObject: "Patch", DeleteObject: "Delete"}[type(command)]
            return f"FailedTo{verb}{command.target.kind}", ""
        case DeleteCollection():
            return f"FailedToDelete{command.kind}Collection", ""
        case PatchStatus():
            return "FailedToUpdateStatus", ""
        case SubmitRayJob() | StopRayJob() | PutServeConfig():
            return f"FailedTo{type(command).__name__}", ""
        case EmitEvent():
            return "", ""


def replica_failure(conditions: list[dict[str, Any]], *, reason: str, message: str, now: str) -> list[dict[str, Any]]:
    """``conditions`` with ReplicaFailure True for ``reason`` (``meta.SetStatusCondition``: replaced in
    place, its transition time kept when it was already True)."""
    found = next((c for c in conditions if c.get("type") == REPLICA_FAILURE), None)
    condition = {
        "type": REPLICA_FAILURE,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": found["lastTransitionTime"]
        if found and found.get("status") == "True" and found.get("lastTransitionTime")
        else now,
    }
    if found is None:
        return [*conditions, condition]
    return [condition if c is found else c for c in conditions]


def owner_path(kind: str, namespace: str, name: str) -> str:
    """The path of the key's custom resource, read (GET) before a failure is shown on it."""
    return object_path(resource_of(conventions.API_VERSION, kind), namespace, name)


class FailureReporter:
    """Writes the Warning Event (and the RayCluster condition) of a failed command."""

    def __init__(self, api: KubeApi, *, clock: Callable[[], datetime]) -> None:
        self._api = api
        self._clock = clock

    async def __call__(self, batch: CommandBatch, command: Command | None, error: str) -> None:
        """Report that ``command`` of ``batch`` (None: the whole batch) failed with ``error``; never raises."""
        key = batch.key
        verb = "batch" if command is None else command_verb(command)
        _failed.add(1, {"raybus.kind": key.kind, "raybus.verb": verb})
        event_reason, condition_reason = failure_reasons(key.kind, key.name, command)
        if not event_reason or batch.report:
            return
        what = f"{batch.id}" if command is None else f"{verb} {command_target(command)}"
        message = f"{what}: {error}"[:MAX_MESSAGE]
        try:
            owner = await self._owner(key.kind, key.namespace, key.name)
            if owner is None:
                return  # the resource is gone: nothing left to tell
            ref = ObjectRef(
                api_version=conventions.API_VERSION,
                kind=key.kind,
                namespace=key.namespace,
                name=key.name,
                uid=str(owner["metadata"].get("uid", "")),
            )
            event = EmitEvent(
                id=f"failed/{batch.id}/{'' if command is None else command.id}",
                regarding=ref,
                event_type="Warning",
                reason=event_reason,
                message=message,
            )
            await self._send(event)
            if condition_reason:
                await self._set_replica_failure(ref, owner, reason=condition_reason, message=message)
        except ApiError as exc:
            log.error("could not show the failure of %s on %s (%s): %s", what, key, exc, message)

    async def _owner(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            response = await self._api.arequest("GET", owner_path(kind, namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        owner: dict[str, Any] = msgspec.json.decode(response.data)
        return owner

    async def _send(self, command: EmitEvent | PatchStatus) -> str:
        call = plan_call(command, now=self._clock())
        try:
            await self._api.aexecute(call)
        except ApiError as exc:
            outcome = outcome_of_error(call, exc)
            if outcome is None:
                raise
            return outcome
        return "applied"

    async def _set_replica_failure(self, ref: ObjectRef, owner: dict[str, Any], *, reason: str, message: str) -> None:
        now = format_time(self._clock())
        for _ in range(CONDITION_ATTEMPTS):
            conditions = replica_failure(
                list((owner.get("status") or {}).get("conditions") or []), reason=reason, message=message, now=now
            )
            patch = PatchStatus(
                target=ref,
                status={"conditions": conditions},
                resource_version=str(owner["metadata"].get("resourceVersion", "")),
            )
            if await self._send(patch) == "applied":
                return
            fresh = await self._owner(ref.kind, ref.namespace, ref.name)
            if fresh is None:
                return
            owner = fresh
