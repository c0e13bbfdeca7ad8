"""Kubernetes Events raybus records: the applier's EmitEvent commands and the watch's refusals.

Deliberately pure: the clock is an argument, and an Event's name is derived from its command, so a
redelivered command is AlreadyExists (409) instead of a second Event.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Final

from schema.messages import EmitEvent, ObjectRef
from schema.times import format_time
from services.edge.calls import ApiCall, collection_path
from services.edge.resources import by_kind

EVENT_COMPONENT: Final = "raybus"


def event_name(regarding: ObjectRef, command_id: str, reason: str, message: str) -> str:
    """``<regarding name>.<short hash>``: deterministic, so a redelivered EmitEvent is AlreadyExists."""
    seed = command_id or f"{regarding.uid}\x1f{reason}\x1f{message}"
    return f"{regarding.name}.{hashlib.sha256(seed.encode()).hexdigest()[:16]}"


def _event_body(command: EmitEvent, now: datetime) -> dict[str, Any]:
    r = command.regarding
    stamp = format_time(now)
    involved: dict[str, Any] = {"apiVersion": r.api_version, "kind": r.kind, "namespace": r.namespace, "name": r.name}
    if r.uid:
        involved["uid"] = r.uid
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(r, command.id, command.reason, command.message), "namespace": r.namespace},
        "involvedObject": involved,
        "reason": command.reason,
        "message": command.message,
        "type": command.event_type,
        "source": {"component": EVENT_COMPONENT},
        "reportingComponent": EVENT_COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def event_call(command: EmitEvent, *, now: datetime) -> ApiCall:
    """The create of the Event a command records (a 409 means it exists already: done).

    Raises:
        PermanentError: the regarded object has no namespace.
    """
    events = by_kind("Event")
    assert events is not None
    return ApiCall(
        method="POST",
        path=collection_path(events, command.regarding.namespace),
        body=_event_body(command, now),
        on_conflict="already_done",
    )
