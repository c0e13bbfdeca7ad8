"""The Kubernetes Events raybus recorded for a key: the ``EmitEvent`` commands of its decisions.

The audit trail stores each command's outcome but not an Event's reason and message; those are in the
decisions on ``RAYBUS_COMMANDS``, read here with direct gets (no consumer). The console joins them with
the audit by ``command_id`` for the outcome and the trace.
"""

from __future__ import annotations

from datetime import datetime

import msgspec
import nats.errors
from nats.aio.client import Client

from schema import subjects
from schema.codec import decode_batch
from schema.keys import ReconcileKey
from schema.messages import EmitEvent
from services.runtime.directget import direct_batches
from services.runtime.errors import RetryableError


class EventOut(msgspec.Struct, frozen=True, kw_only=True):
    """One Event a decision emitted."""

    at: datetime
    """When the decision was made (its ``now``)."""
    type: str
    reason: str
    message: str
    regarding: str
    """``Kind namespace/name`` of the object the Event is about."""
    command_id: str
    batch_seq: int


class EventsOut(msgspec.Struct, frozen=True, kw_only=True):
    """A key's Events, oldest first."""

    items: list[EventOut]


async def key_events(nc: Client, key: ReconcileKey) -> EventsOut:
    """The Events of every decision the commands stream still holds for ``key``.

    Raises:
        RetryableError: NATS did not answer.
    """
    items: list[EventOut] = []
    try:
        async for stored in direct_batches(
            nc, subjects.COMMANDS_STREAM, subject_filter=subjects.stored_commands_filter(key)
        ):
            try:
                batch = decode_batch(stored.data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # the replay view reports undecodable decisions
            for command in batch.commands:
                if isinstance(command, EmitEvent):
                    ref = command.regarding
                    items.append(
                        EventOut(
                            at=batch.issued_at,
                            type=command.event_type,
                            reason=command.reason,
                            message=command.message,
                            regarding=f"{ref.kind} {ref.namespace}/{ref.name}",
                            command_id=command.id,
                            batch_seq=stored.seq,
                        )
                    )
    except nats.errors.Error as exc:
        raise RetryableError(f"NATS: {exc or type(exc).__name__}") from exc
    return EventsOut(items=items)
