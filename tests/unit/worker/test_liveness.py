"""The worker's liveness rules: a write refused as stale brings a fresh decision, and every key has a
resync spread over half a period."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from schema.config import OperatorConfig
from schema.decision import Decision, Snapshot
from schema.keys import ReconcileKey
from schema.messages import CommandBatch, ObjectRef, PatchStatus
from services.reconciler.worker.decide import draft
from services.reconciler.worker.inflight import REFUSAL_BACKOFF, InFlight
from services.reconciler.worker.resync import interval, phase, resync_at
from services.replay.replayer import Replayer
from tests.unit.replay.conftest import load, recorded_params

KEY = ReconcileKey(kind="RayCluster", namespace="ns", name="c")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
REF = ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace="ns", name="c")


class Memory:
    """An InFlight on a clock the test moves (monotonic seconds and the wall clock together)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.inflight = InFlight(
            grace=2.0,
            max_age=60.0,
            clock=lambda: self.now,
            wall=lambda: T0 + timedelta(seconds=self.now),
        )

    def decide(self, ready: int, resource_version: str, seq: int) -> CommandBatch:
        status = PatchStatus(target=REF, status={"readyWorkerReplicas": ready}, resource_version=resource_version)
        drafted = draft(
            reconcilers={"RayCluster": lambda s, n, c: Decision(commands=(status,))},
            snapshot=Snapshot(key=KEY, entries={}, revision=seq),
            now=T0,
            config=OperatorConfig(),
        )
        batch = self.inflight.filter(drafted.batch, applied_floor=0, entries={}, ids=drafted.ids())
        self.inflight.published(KEY, batch_seq=seq)
        return batch

    def at(self, seconds: float) -> datetime:
        return T0 + timedelta(seconds=seconds)


def test_a_refused_status_write_makes_its_key_due_once_it_is_out_of_flight() -> None:
    m = Memory()
    (patch,) = m.decide(ready=2, resource_version="5", seq=1).commands
    m.now = 1.0
    m.inflight.reported(KEY, patch.id, took_effect=False, refused=True)
    assert m.inflight.refused(applied_floor=0) == {}  # its grace runs: a decision now would repeat it
    m.now = 3.5
    assert m.inflight.refused(applied_floor=0) == {KEY: m.at(3.5)}  # the first refusal: decided again at once
    assert m.inflight.refused(applied_floor=0) == {}  # returned once


def test_refusals_in_a_row_back_off_and_a_quiet_spell_starts_over() -> None:
    m = Memory()
    for n, expected in ((1, 0.0), (2, REFUSAL_BACKOFF.delay(1)), (3, REFUSAL_BACKOFF.delay(2))):
        (patch,) = m.decide(ready=2, resource_version="5", seq=n).commands
        m.inflight.reported(KEY, patch.id, took_effect=False, refused=True)
        m.now += 3.0
        assert m.inflight.refused(applied_floor=0) == {KEY: m.at(m.now + expected)}
    m.now += 500.0
    (patch,) = m.decide(ready=2, resource_version="6", seq=9).commands
    m.inflight.reported(KEY, patch.id, took_effect=False, refused=True)
    m.now += 3.0
    assert m.inflight.refused(applied_floor=0) == {KEY: m.at(m.now)}


def test_a_decision_after_the_refusal_is_the_fresh_one() -> None:
    m = Memory()
    (patch,) = m.decide(ready=2, resource_version="5", seq=1).commands
    m.inflight.reported(KEY, patch.id, took_effect=False, refused=True)
    m.now = 1.0
    m.decide(ready=4, resource_version="6", seq=2)  # an event came: its decision is on a newer view
    m.now = 10.0
    assert m.inflight.refused(applied_floor=0) == {}


def test_an_applied_write_makes_nothing_due() -> None:
    m = Memory()
    (patch,) = m.decide(ready=2, resource_version="5", seq=1).commands
    m.inflight.reported(KEY, patch.id)
    m.now = 10.0
    assert m.inflight.refused(applied_floor=0) == {}


def test_a_newer_status_of_the_same_version_waits_for_the_first_and_is_decided_again_if_that_is_refused() -> None:
    """Two decisions on the same resourceVersion: only one patch can pass, so the newer waits (withheld);
    when the one sent is refused, the key is decided again, and the fresh decision's patch goes out."""
    m = Memory()
    (first,) = m.decide(ready=2, resource_version="5", seq=1).commands
    assert m.decide(ready=4, resource_version="5", seq=2).commands == ()
    m.inflight.reported(KEY, first.id, took_effect=False, refused=True)
    m.now = 3.0
    assert KEY in m.inflight.refused(applied_floor=0)
    (fresh,) = m.decide(ready=4, resource_version="7", seq=3).commands
    assert isinstance(fresh, PatchStatus) and fresh.status == {"readyWorkerReplicas": 4}


def test_a_newer_status_of_the_same_version_is_looked_at_again_when_the_first_changed_nothing() -> None:
    """The patch sent changed nothing on the server (a status write of the same second that only carries
    transitions): the version stays, so no watch event follows. The withheld newer one must not wait for
    the key's resync: once the first is out of flight, the key is due at once; unless a decision came in
    between, which stands for the withheld one."""
    m = Memory()
    (first,) = m.decide(ready=2, resource_version="5", seq=1).commands
    assert m.decide(ready=4, resource_version="5", seq=2).commands == ()
    m.now = 1.0
    m.inflight.reported(KEY, first.id)
    assert m.inflight.due(applied_floor=0) == {}  # its grace runs: its echo may still come
    m.now = 3.5
    assert m.inflight.due(applied_floor=0) == {KEY: None}
    assert m.inflight.due(applied_floor=0) == {}  # returned once

    (first,) = m.decide(ready=2, resource_version="6", seq=3).commands
    m.decide(ready=4, resource_version="6", seq=4)
    m.inflight.reported(KEY, first.id)
    m.decide(ready=4, resource_version="7", seq=5)  # the echo of the first came and was decided
    m.now = 10.0
    assert m.inflight.due(applied_floor=0) == {}


def test_resync_intervals_are_spread_between_half_a_period_and_a_period() -> None:
    keys = [ReconcileKey(kind="RayCluster", namespace="ns", name=f"c{n}") for n in range(2000)]
    intervals = [interval(key, 300.0) for key in keys]
    assert all(150.0 <= i < 300.0 for i in intervals)
    # evenly spread: each tenth of the window holds about a tenth of the keys
    tenths = [sum(1 for i in intervals if 150.0 + 15.0 * t <= i < 165.0 + 15.0 * t) for t in range(10)]
    assert all(120 <= count <= 280 for count in tenths), tenths
    assert phase(keys[0]) == phase(ReconcileKey(kind="RayCluster", namespace="ns", name="c0"))


def test_resync_off() -> None:
    assert resync_at(KEY, T0, 0.0) is None
    assert resync_at(KEY, T0, 60.0) == T0 + timedelta(seconds=interval(KEY, 60.0))


def test_a_refusal_of_a_command_this_memory_does_not_hold_still_makes_its_key_due() -> None:
    """Published by the partition's former owner, or kept past max_age: the refusal is no less a sign."""
    m = Memory()
    m.inflight.reported(KEY, "published-elsewhere", took_effect=False, refused=True)
    assert m.inflight.refused(applied_floor=0) == {KEY: m.at(0.0)}
    m.inflight.prune(applied_floor=0)
    assert not m.inflight.tracks(KEY)


@pytest.mark.parametrize("path", recorded_params())
def test_every_recorded_status_write_carries_the_version_its_decision_saw(path: Path) -> None:
    """The ordering of status writes rests on this: a status patch without a resourceVersion would
    overwrite whatever a newer decision wrote. Checked on the histories recorded from real pipeline runs,
    every kind, re-decided by today's reconcile."""
    recorded = load(path)
    history = recorded.history()
    result = Replayer(config=recorded.operator_config or OperatorConfig()).replay_history(history)
    batches = [step.replayed for step in result.steps if step.replayed is not None]
    writes = [c for batch in batches for c in batch.commands if isinstance(c, PatchStatus)]
    assert writes
    assert all(c.resource_version for c in writes), [c for c in writes if not c.resource_version]
