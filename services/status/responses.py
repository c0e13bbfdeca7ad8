"""What the status HTTP API returns: msgspec Structs, encoded as JSON and described in the OpenAPI document
from these same definitions (``msgspec.json.schema_components``), and decoded by ``raybus history``.

Evolution follows the bus rules: a new field gets a default, a field never changes type. Kind views are
optional members (``rayjob``; issue 7 adds ``rayservice``), present only on resources of that kind.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from services.status.models import Command, RayJobView, Transition
from services.status.projection import FieldMark
from services.status.store import ResourceRecord


class FieldValue(msgspec.Struct, frozen=True, kw_only=True):
    """The latest value of one transition field and when it was reached."""

    value: str
    at: datetime


class RayJobOut(msgspec.Struct, frozen=True, kw_only=True):
    """The RayJob view of a resource."""

    submission_mode: str
    job_id: str
    cluster_name: str
    deployment_status: str
    job_status: str
    attempts: int
    started_at: datetime | None
    ended_at: datetime | None


class ResourceOut(msgspec.Struct, frozen=True, kw_only=True):
    """One incarnation (uid) of a custom resource; ``deleted_at`` is set once it is gone."""

    kind: str
    uid: str
    namespace: str
    name: str
    status: str
    first_seen: datetime
    deleted_at: datetime | None
    updated_at: datetime
    last_seq: int
    """Highest RAYBUS_RESULTS sequence that changed this resource."""
    fields: dict[str, FieldValue]
    rayjob: RayJobOut | None = None


class ResourcePage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of resources; pass ``next_after`` as ``after`` for the next one (null: last page)."""

    items: list[ResourceOut]
    next_after: int | None = None


class TransitionOut(msgspec.Struct, frozen=True, kw_only=True):
    """One confirmed state-machine step."""

    id: int
    kind: str
    uid: str
    namespace: str
    name: str
    field: str
    from_value: str
    to_value: str
    reason: str
    message: str
    resource_version: str
    at: datetime
    trace_id: str
    attributes: dict[str, str]
    stream_seq: int
    """Sequence of the result in RAYBUS_RESULTS: where ``raybus replay`` can start."""
    batch_id: str
    command_id: str


class History(msgspec.Struct, frozen=True, kw_only=True):
    """A resource and its whole timeline, ordered by time."""

    resource: ResourceOut
    transitions: list[TransitionOut]


class CommandOut(msgspec.Struct, frozen=True, kw_only=True):
    """One command outcome of the audit trail."""

    id: int
    batch_id: str
    command_id: str
    batch_seq: int
    verb: str
    target: str
    kind: str
    namespace: str
    name: str
    outcome: str
    error: str
    status_code: int
    resource_version: str
    at: datetime
    trace_id: str
    stream_seq: int


class CommandPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of the audit trail; pass ``next_after`` as ``after`` for the next one (null: last page)."""

    items: list[CommandOut]
    next_after: int | None = None


class ErrorOut(msgspec.Struct, frozen=True, kw_only=True):
    """Every non-2xx answer."""

    error: str
    """``not_found``, ``bad_request``, ``unavailable``, ..."""
    message: str


def _columns(row: Any, struct: type[msgspec.Struct]) -> dict[str, Any]:
    return {name: getattr(row, name) for name in struct.__struct_fields__}


def resource_out(record: ResourceRecord) -> ResourceOut:
    """The API form of a stored resource (and its kind view)."""
    row = record.resource
    marks = msgspec.convert(row.fields, dict[str, FieldMark])
    return ResourceOut(
        kind=row.kind,
        uid=row.uid,
        namespace=row.namespace,
        name=row.name,
        status=row.status,
        first_seen=row.first_seen,
        deleted_at=row.deleted_at,
        updated_at=row.updated_at,
        last_seq=row.last_seq,
        fields={name: FieldValue(value=mark.value, at=mark.at) for name, mark in sorted(marks.items())},
        rayjob=rayjob_out(record.rayjob) if record.rayjob is not None else None,
    )


def rayjob_out(row: RayJobView) -> RayJobOut:
    """The API form of a RayJob view row."""
    return RayJobOut(**_columns(row, RayJobOut))


def transition_out(row: Transition) -> TransitionOut:
    """The API form of a transition row."""
    return TransitionOut(**_columns(row, TransitionOut))


def command_out(row: Command) -> CommandOut:
    """The API form of an audit row."""
    return CommandOut(**_columns(row, CommandOut))
