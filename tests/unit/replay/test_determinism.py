"""Non-determinism guards: every reconcile run twice on the same snapshot agrees with itself, and clock,
randomness, uuid and environment reads raise while reconcile runs (temporal's sandbox tests as the
model: a table of forbidden calls, each must be refused; a table of allowed ones, each must work)."""

from __future__ import annotations

import datetime as dt
import os
import random
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import msgspec
import pytest

from schema.config import OperatorConfig
from schema.decision import Decision, Snapshot
from services.reconciler.registry import default_reconcilers
from services.replay.archive import HistoryFile
from services.replay.compare import without_id
from services.replay.replayer import Replayer
from tests.unit.replay.conftest import REPLAYS, load
from tests.unit.replay.nondeterminism import NondeterministicCall, forbid_nondeterminism, guarded

THIS_MODULE = (__name__,)


def reversed_entries(snapshot: Snapshot) -> Snapshot:
    """The same snapshot with every map in reverse insertion order (a KV read promises no order)."""
    entries = {kind: dict(reversed(by_name.items())) for kind, by_name in reversed(snapshot.entries.items())}
    return Snapshot(key=snapshot.key, entries=entries, revision=snapshot.revision)


def copied(snapshot: Snapshot) -> Snapshot:
    """The same snapshot made of new objects: nothing remembered by their identity applies to it."""
    entries = msgspec.json.decode(msgspec.json.encode(snapshot.entries))
    return Snapshot(key=snapshot.key, entries=entries, revision=snapshot.revision)


def encoded(decision: Decision) -> bytes:
    return msgspec.json.encode(decision, order="deterministic")


def encoded_entries(snapshot: Snapshot) -> bytes:
    return msgspec.json.encode(snapshot.entries, order="deterministic")


def test_every_reconcile_twice_on_the_same_snapshot_agrees(recorded: HistoryFile) -> None:
    """Run each recorded step's reconcile again on the same snapshot objects, in reverse entry order and
    under the guard, and on a copy of it: same decision (catches hidden state, dict-order dependence, a
    remembered result that changed since, ``common.memo``), and the snapshot left as it was (the snapshot
    reader shares decoded entries between the snapshots of a key)."""
    config = recorded.operator_config or OperatorConfig()
    reconcilers = default_reconcilers()
    checked = 0
    for step in Replayer(config=config, keep_snapshots=True).iter_steps(recorded.history()):
        assert step.snapshot is not None and step.decision is not None
        reconcile = reconcilers[step.snapshot.key.kind]
        before = encoded_entries(step.snapshot)
        again = guarded(reconcilers)[step.snapshot.key.kind](reversed_entries(step.snapshot), step.issued_at, config)
        third = reconcile(step.snapshot, step.issued_at, config)
        fresh = reconcile(copied(step.snapshot), step.issued_at, config)
        assert encoded(again) == encoded(third) == encoded(fresh), f"step {step.index}: reconcile is not deterministic"
        assert encoded_entries(step.snapshot) == before, f"step {step.index}: reconcile changed its snapshot"
        # And the same as the replay's decide, which gives ids only to the commands the worker published.
        assert again.commands == tuple(without_id(c) for c in step.decision.commands)
        checked += 1
    assert checked == len(recorded.decisions)


def test_recorded_histories_replay_under_the_guard(recorded: HistoryFile) -> None:
    replayer = Replayer(config=recorded.operator_config or OperatorConfig(), reconcilers=guarded(default_reconcilers()))
    result = replayer.replay_history(recorded.history())
    assert all(step.error == "" for step in result.steps)


FORBIDDEN_CALLS: list[Any] = [
    pytest.param(lambda: time.time(), id="time.time"),
    pytest.param(lambda: time.time_ns(), id="time.time_ns"),
    pytest.param(lambda: time.monotonic(), id="time.monotonic"),
    pytest.param(lambda: time.perf_counter(), id="time.perf_counter"),
    pytest.param(lambda: time.localtime(), id="time.localtime"),
    pytest.param(lambda: datetime.now(UTC), id="datetime.now (from datetime import datetime)"),
    pytest.param(lambda: datetime.utcnow(), id="datetime.utcnow"),
    pytest.param(lambda: datetime.today(), id="datetime.today"),
    pytest.param(lambda: dt.datetime.now(), id="datetime.datetime.now (import datetime)"),
    pytest.param(lambda: date.today(), id="date.today"),
    pytest.param(lambda: dt.date.today(), id="datetime.date.today"),
    pytest.param(lambda: random.random(), id="random.random"),
    pytest.param(lambda: random.randint(0, 9), id="random.randint"),
    pytest.param(lambda: random.choice("abc"), id="random.choice"),
    pytest.param(lambda: random.shuffle([1, 2]), id="random.shuffle"),
    pytest.param(lambda: random.sample(range(9), 2), id="random.sample"),
    pytest.param(lambda: random.uniform(0, 1), id="random.uniform"),
    pytest.param(lambda: random.getrandbits(8), id="random.getrandbits"),
    pytest.param(lambda: uuid.uuid4(), id="uuid.uuid4"),
    pytest.param(lambda: uuid.uuid1(), id="uuid.uuid1"),
    pytest.param(lambda: os.urandom(4), id="os.urandom"),
    pytest.param(lambda: secrets.token_hex(4), id="secrets.token_hex"),
    pytest.param(lambda: os.environ["HOME"], id="os.environ[...]"),
    pytest.param(lambda: os.environ.get("HOME"), id="os.environ.get"),
    pytest.param(lambda: "HOME" in os.environ, id="in os.environ"),
    pytest.param(lambda: dict(os.environ), id="dict(os.environ)"),
    pytest.param(lambda: os.getenv("HOME"), id="os.getenv"),
]

ALLOWED_CALLS: list[Any] = [
    pytest.param(lambda: datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=5), id="datetime arithmetic"),
    pytest.param(lambda: datetime.fromisoformat("2025-01-01T00:00:00+00:00"), id="datetime.fromisoformat"),
    pytest.param(lambda: isinstance(datetime(2025, 1, 1), datetime), id="isinstance datetime"),
    pytest.param(lambda: type(datetime(2025, 1, 1)) is dt.datetime, id="real datetime instances"),
    pytest.param(lambda: date(2025, 1, 1).isoformat(), id="date"),
    pytest.param(lambda: datetime.fromtimestamp(0, UTC), id="datetime.fromtimestamp"),
    pytest.param(lambda: random.Random(42).random(), id="seeded random.Random"),
    pytest.param(lambda: uuid.uuid5(uuid.NAMESPACE_DNS, "raybus"), id="uuid.uuid5"),
    pytest.param(lambda: msgspec.json.encode({"at": datetime(2025, 1, 1, tzinfo=UTC)}), id="msgspec datetime"),
    pytest.param(lambda: msgspec.json.decode(b'"2025-01-01T00:00:00Z"', type=datetime), id="msgspec decode"),
]


@pytest.mark.parametrize("call", FORBIDDEN_CALLS)
def test_forbidden_calls_raise_inside_the_guard(call: Callable[[], object]) -> None:
    call()  # fine outside
    with forbid_nondeterminism(THIS_MODULE), pytest.raises(NondeterministicCall):
        call()
    call()  # restored


@pytest.mark.parametrize("call", ALLOWED_CALLS)
def test_deterministic_calls_work_inside_the_guard(call: Callable[[], object]) -> None:
    with forbid_nondeterminism(THIS_MODULE):
        assert call() is not None


def test_other_threads_keep_the_clock_and_the_environment_while_the_guard_is_on() -> None:
    """Services a test runs beside a guarded reconcile have threads of their own (lease renewals)."""
    seen: list[object] = []

    def elsewhere() -> None:
        seen.extend([time.monotonic() > 0, os.environ.get("PATH") is not None, uuid.uuid4() is not None])

    with forbid_nondeterminism():
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        with pytest.raises(NondeterministicCall):
            time.monotonic()
    assert seen == [True, True, True]


def test_the_guard_restores_everything() -> None:
    import sys

    before = (time.time, random.random, uuid.uuid4, os.environ, os.getenv, sys.getprofile())
    with forbid_nondeterminism(THIS_MODULE):
        assert time.time is not before[0] and os.environ is not before[3]
    assert (time.time, random.random, uuid.uuid4, os.environ, os.getenv, sys.getprofile()) == before
    assert datetime.now(UTC).year >= 2025


@pytest.mark.parametrize("call", FORBIDDEN_CALLS[:12:3])
def test_a_reconcile_reading_the_clock_is_caught_during_replay(call: Callable[[], object]) -> None:
    """Through the replayer: the forbidden call becomes a divergence naming it."""
    from services.reconciler.raycluster import reconcile as raycluster_reconcile

    def sneaky(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
        call()
        return raycluster_reconcile(snapshot, now, config)

    history = load(REPLAYS / "raycluster-sample-lifecycle.json").history()
    replayer = Replayer(reconcilers=guarded({"RayCluster": sneaky}, (*THIS_MODULE, "services.reconciler")))
    result = replayer.replay_history(history, raise_on_divergence=False)
    assert len(result.divergences) == len(history.decisions)
    assert result.steps[0].error.startswith("NondeterministicCall: reconcile ")
