"""Recorded histories (``tests/replays/*.json``) and small builders for synthetic ones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from schema.keys import ReconcileKey
from schema.messages import CommandBatch, Observation, TimerTick, WatchEvent, WatchEventType
from services.replay.archive import HistoryFile, read_history_file
from services.replay.history import RecordedDecision, RecordedInput

REPLAYS = Path(__file__).resolve().parents[2] / "replays"
RECORDED = sorted(REPLAYS.glob("*.json"))
T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
KEY = ReconcileKey(kind="RayCluster", namespace="default", name="demo")


def recorded_params() -> list[Any]:
    """One pytest param per recorded history file, id = file stem."""
    assert RECORDED, f"no recorded histories in {REPLAYS}"
    return [pytest.param(path, id=path.stem) for path in RECORDED]


def load(path: Path) -> HistoryFile:
    return read_history_file(path)


@pytest.fixture(params=recorded_params())
def recorded(request: pytest.FixtureRequest) -> HistoryFile:
    """Each recorded history in turn."""
    return load(request.param)


def obj(kind: str, name: str, *, uid: str = "", rv: str = "1", **fields: Any) -> dict[str, Any]:
    """A minimal Kubernetes object."""
    return {
        "kind": kind,
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}", "resourceVersion": rv},
        **fields,
    }


def event(
    seq: int,
    revision: int,
    kind: str,
    name: str,
    event_type: WatchEventType = "ADDED",
    *,
    key: ReconcileKey = KEY,
    uid: str = "",
    **fields: Any,
) -> RecordedInput:
    """A recorded WatchEvent of ``kind/name`` written at KV ``revision``."""
    body = obj(kind, name, uid=uid, rv=str(revision), **fields)
    message = WatchEvent(
        key=key,
        event_type=event_type,
        entry_kind=kind,
        object=body,
        resource_version=str(revision),
        observed_at=T0 + timedelta(seconds=seq),
        kv_revision=revision,
    )
    return RecordedInput(seq=seq, time=T0 + timedelta(seconds=seq), message=message)


def observation(seq: int, revision: int, job: str, data: dict[str, Any], *, key: ReconcileKey = KEY) -> RecordedInput:
    message = Observation(
        key=key,
        source="rayjob",
        entry_name=job,
        data=data,
        observed_at=T0 + timedelta(seconds=seq),
        kv_revision=revision,
    )
    return RecordedInput(seq=seq, time=T0 + timedelta(seconds=seq), message=message)


def tick(seq: int, *, key: ReconcileKey = KEY) -> RecordedInput:
    message = TimerTick(key=key, due_at=T0 + timedelta(seconds=seq), reason="requeue")
    return RecordedInput(seq=seq, time=T0 + timedelta(seconds=seq), message=message)


def decision(
    seq: int, revision: int, inputs: tuple[int, ...], *, key: ReconcileKey = KEY, **fields: Any
) -> RecordedDecision:
    """A recorded batch (no commands unless given) that read KV ``revision``."""
    batch = CommandBatch(
        id=f"b{seq}",
        key=key,
        issued_at=T0 + timedelta(seconds=seq, milliseconds=500),
        commands=fields.pop("commands", ()),
        inputs=inputs,
        snapshot_revision=revision,
        **fields,
    )
    return RecordedDecision(seq=seq, time=batch.issued_at, batch=batch)
