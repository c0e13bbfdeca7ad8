"""What the status HTTP API returns: msgspec Structs, encoded as JSON and described in the OpenAPI document
from these same definitions (``msgspec.json.schema_components``), and decoded by ``raybus history``.

Evolution follows the bus rules: a new field gets a default, a field never changes type. Kind views are
optional members (``rayjob``, ``rayservice``), present only on resources of that kind.
``RunsOut`` lists a RayCronJob's scheduled runs, each joined with the RayJob it created.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

import msgspec

from schema.times import parse_time
from services.status.kinds import RUN_RAYJOB_ATTRIBUTE
from services.status.models import Command, RayJobView, RayServiceView, Transition
from services.status.store import ResourceRecord, RunRecord
from services.status.transition_folds import FieldMark


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


class RayServiceOut(msgspec.Struct, frozen=True, kw_only=True):
    """The RayService view of a resource (``services.status.transition_folds.RayServiceState`` explains it)."""

    service_status: str
    ready_reason: str
    active_cluster: str
    pending_cluster: str
    serving_cluster: str
    pending_traffic_percent: int | None
    rollback_status: str
    clusters_created: int
    clusters_deleted: int
    upgrades: int
    rollbacks: int
    ready_at: datetime | None
    upgrade_started_at: datetime | None
    upgraded_at: datetime | None
    last_upgrade_seconds: float | None


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
    rayservice: RayServiceOut | None = None


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
    """A resource and a page of its timeline, ordered by time."""

    resource: ResourceOut
    transitions: list[TransitionOut]
    next_after: int | None = None
    """Cursor of the next page (``?after=``), null on the last one."""


class RunOut(msgspec.Struct, frozen=True, kw_only=True):
    """One scheduled run of a RayCronJob and, when it created one, its RayJob as the history knows it."""

    scheduled_at: datetime | None
    """The tick (the new ``lastScheduleTime``); null only if the recorded value does not parse."""
    recorded_at: datetime
    """When the reconcile that scheduled it ran."""
    outcome: str
    """The reason recorded with the tick (``Scheduled``)."""
    message: str
    rayjob_name: str
    """The RayJob created for the tick ("" if the transition names none)."""
    rayjob_uid: str | None = None
    """Null while the history has not seen that RayJob (or there is none)."""
    deployment_status: str | None = None
    job_status: str | None = None
    rayjob_deleted_at: datetime | None = None
    history_url: str | None = None
    """Path of that RayJob's own history (``/v1/rayjobs/{namespace}/{name}/transitions?uid=``)."""
    trace_id: str
    stream_seq: int


class RunsOut(msgspec.Struct, frozen=True, kw_only=True):
    """A RayCronJob and its latest scheduled runs, oldest first; ``total`` counts every recorded run."""

    resource: ResourceOut
    runs: list[RunOut]
    total: int


class CommandOut(msgspec.Struct, frozen=True, kw_only=True):
    """One command outcome of the audit trail."""

    id: int
    batch_id: str
    command_id: str
    batch_seq: int
    delivery: int
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
        rayservice=rayservice_out(record.rayservice) if record.rayservice is not None else None,
    )


def rayjob_out(row: RayJobView) -> RayJobOut:
    """The API form of a RayJob view row."""
    return RayJobOut(**_columns(row, RayJobOut))


def rayservice_out(row: RayServiceView) -> RayServiceOut:
    """The API form of a RayService view row."""
    return RayServiceOut(**_columns(row, RayServiceOut))


def transition_out(row: Transition) -> TransitionOut:
    """The API form of a transition row."""
    return TransitionOut(**_columns(row, TransitionOut))


def _instant(text: str) -> datetime | None:
    """An RFC 3339 time as the reconcile wrote it (``...Z``), or None."""
    return parse_time(text)


def run_out(record: RunRecord) -> RunOut:
    """The API form of a scheduled run, linked to its RayJob's history when that is known."""
    t = record.transition
    linked: dict[str, Any] = {}
    if record.rayjob is not None:
        job = record.rayjob.resource
        path = f"/v1/rayjobs/{quote(job.namespace, safe='')}/{quote(job.name, safe='')}/transitions"
        linked = {
            "rayjob_uid": job.uid,
            "deployment_status": record.rayjob.rayjob.deployment_status if record.rayjob.rayjob else job.status,
            "job_status": record.rayjob.rayjob.job_status if record.rayjob.rayjob else None,
            "rayjob_deleted_at": job.deleted_at,
            "history_url": f"{path}?{urlencode({'uid': job.uid})}",
        }
    return RunOut(
        scheduled_at=_instant(t.to_value),
        recorded_at=t.at,
        outcome=t.reason,
        message=t.message,
        rayjob_name=str(t.attributes.get(RUN_RAYJOB_ATTRIBUTE) or ""),
        trace_id=t.trace_id,
        stream_seq=t.stream_seq,
        **linked,
    )


def command_out(row: Command) -> CommandOut:
    """The API form of an audit row."""
    return CommandOut(**_columns(row, CommandOut))
