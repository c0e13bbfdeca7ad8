"""Pure parts of the worker: partition assignment, decision ids, timer header rounding."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from schema.config import OperatorConfig
from schema.decision import OBS_RAY_JOB, Decision, Snapshot
from schema.keys import ReconcileKey
from schema.messages import (
    BusInput,
    Command,
    CommandBatch,
    CreateObject,
    DashboardRef,
    EmitEvent,
    ObjectRef,
    SubmitRayJob,
    TimerTick,
    WatchEvent,
)
from services.reconciler.worker.decide import Ids, decision_time, draft
from services.reconciler.worker.timers import schedule_header
from services.runtime.assignment import owner_of, partitions_of

KEY = ReconcileKey(kind="RayCluster", namespace="ns", name="c")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("members", [["a"], ["a", "b"], ["a", "b", "c"], [f"w{i}" for i in range(7)]])
def test_assignment_covers_every_partition_exactly_once(members: list[str]) -> None:
    owned = [partitions_of(m, members, 16) for m in members]
    assert sorted(p for parts in owned for p in parts) == list(range(16))


def test_assignment_moves_few_partitions_when_a_member_joins() -> None:
    before = {p: owner_of(p, ["a", "b", "c"]) for p in range(64)}
    after = {p: owner_of(p, ["a", "b", "c", "d"]) for p in range(64)}
    moved = [p for p in range(64) if before[p] != after[p]]
    assert all(after[p] == "d" for p in moved)


def _create(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    ref = ObjectRef(api_version="v1", kind="Pod", namespace="ns", name="p")
    return Decision(commands=(CreateObject(target=ref, body={}),))


def test_decide_is_deterministic_and_fills_ids() -> None:
    snap = Snapshot(key=KEY, entries={})
    one = draft(
        reconcilers={"RayCluster": _create}, snapshot=snap, now=T0, config=OperatorConfig(), sequences=[3]
    ).outcome()
    two = draft(
        reconcilers={"RayCluster": _create}, snapshot=snap, now=T0, config=OperatorConfig(), sequences=[3]
    ).outcome()
    other = draft(
        reconcilers={"RayCluster": _create}, snapshot=snap, now=T0, config=OperatorConfig(), sequences=[4]
    ).outcome()
    assert one.batch == two.batch
    assert one.batch.commands[0].id
    assert other.batch.id != one.batch.id
    assert other.batch.commands[0].id == one.batch.commands[0].id


def _twice(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    ref = ObjectRef(api_version="v1", kind="Pod", namespace="ns", name="p")
    event = EmitEvent(regarding=ref, event_type="Normal", reason="R", message="m")
    return Decision(
        commands=(event, msgspec.structs.replace(event, id="set-by-reconcile"), CreateObject(target=ref, body={}))
    )


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob", "RayService", "RayCronJob"])
def test_command_ids_are_decides_for_every_kind(kind: str) -> None:
    """The one id rule: the same decision on the same snapshot gets the same ids (a redelivery is
    de-duplicated), the same commands decided on a later snapshot get others (never taken for the ones
    applied before), and no two commands of one decision share one, whatever reconcile set."""
    key = ReconcileKey(kind=kind, namespace="ns", name="c")  # type: ignore[arg-type]

    def run(revision: int, sequence: int) -> CommandBatch:
        snap = Snapshot(key=key, entries={}, revision=revision)
        config = OperatorConfig()
        return (
            draft(reconcilers={key.kind: _twice}, snapshot=snap, now=T0, config=config, sequences=[sequence])
            .outcome()
            .batch
        )

    first, redelivered, later = run(7, 1), run(7, 1), run(8, 2)
    assert [c.id for c in first.commands] == [c.id for c in redelivered.commands] and first.id == redelivered.id
    assert len({c.id for c in first.commands}) == 3 and "set-by-reconcile" not in {c.id for c in first.commands}
    assert not {c.id for c in first.commands} & {c.id for c in later.commands}
    assert [msgspec.structs.replace(c, id="") for c in first.commands] == [
        msgspec.structs.replace(c, id="") for c in later.commands
    ]


def test_decision_time_is_the_latest_input() -> None:
    later = datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    inputs: list[BusInput] = [
        WatchEvent(key=KEY, event_type="ADDED", entry_kind="Pod", object={}, resource_version="1", observed_at=T0),
        TimerTick(key=KEY, due_at=later),
    ]
    assert decision_time(inputs) == later


@pytest.mark.parametrize(
    ("due", "header"),
    [
        (datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC), "@at 2026-01-01T00:00:00Z"),
        (datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=UTC), "@at 2026-01-01T00:00:01Z"),
    ],
)
def test_schedule_header_rounds_up(due: datetime, header: str) -> None:
    assert schedule_header(due) == header


def test_a_decision_without_commands_is_still_recorded() -> None:
    snap = Snapshot(key=KEY, entries={}, revision=42)
    nothing = draft(
        reconcilers={"RayCluster": lambda s, n, c: Decision(rules=("noop",))},
        snapshot=snap,
        now=T0,
        config=OperatorConfig(),
        sequences=[7],
    ).outcome()
    assert nothing.batch.commands == ()
    assert nothing.batch.snapshot_revision == 42
    assert nothing.batch.rules == ("noop",)
    assert nothing.batch.inputs == (7,)


def test_in_flight_commands_are_withheld_until_applied_and_recorded() -> None:
    from services.reconciler.worker.inflight import InFlight

    clock = [0.0]
    inflight = InFlight(grace=2.0, max_age=60.0, clock=lambda: clock[0])
    snap = Snapshot(key=KEY, entries={}, revision=1)
    first = draft(
        reconcilers={"RayCluster": _create}, snapshot=snap, now=T0, config=OperatorConfig(), sequences=[1]
    ).outcome()
    later = msgspec.structs.replace(snap, revision=2)
    again = draft(
        reconcilers={"RayCluster": _create}, snapshot=later, now=T0, config=OperatorConfig(), sequences=[2]
    ).outcome()
    assert again.batch.commands[0].id != first.batch.commands[0].id
    assert inflight.filter(first.batch, applied_floor=0).commands == first.batch.commands
    assert not inflight.sending(KEY)  # decided on any floor: nothing of the key to settle
    inflight.published(KEY, batch_seq=10)
    assert inflight.sending(KEY)
    clock[0] = 30.0  # long after publishing, but not applied yet: still in flight
    withheld = inflight.filter(again.batch, applied_floor=9)
    assert withheld.commands == ()
    assert withheld.suppressed == (first.batch.commands[0].id,)  # named by its in-flight twin
    assert withheld.id == again.batch.id
    inflight.published(KEY, batch_seq=11)
    assert inflight.filter(again.batch, applied_floor=10).commands == ()  # applied: grace starts now
    clock[0] = 32.5
    assert inflight.filter(again.batch, applied_floor=10).commands == again.batch.commands


def _scale(workers: int) -> Callable[[Snapshot, datetime, OperatorConfig], Decision]:
    def reconcile(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
        commands: list[Command] = []
        for i in range(workers):
            ref = ObjectRef(api_version="v1", kind="Pod", namespace="ns", name=f"w{i}")
            commands.append(CreateObject(target=ref, body={"spec": {"image": "ray"}}))
            commands.append(EmitEvent(regarding=ref, event_type="Normal", reason="Created", message=f"w{i}"))
        cluster = ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace="ns", name="c")
        scaled = EmitEvent(regarding=cluster, event_type="Normal", reason="Scaled", message="up")
        commands.extend((scaled, scaled))
        return Decision(commands=tuple(commands))

    return reconcile


class _CountedIds(Ids):
    """The id rule, counting the commands it encodes."""

    encoded = 0

    def count(self, command: Command) -> tuple[str, int]:
        type(self).encoded += 1
        return super().count(command)


def test_the_worker_gives_ids_only_to_what_it_publishes_and_they_are_decides() -> None:
    """A decision filtered before its commands have ids keeps exactly the ids the whole decision gives
    them; the creates it withholds as in flight are never encoded."""
    from services.reconciler.worker.inflight import InFlight

    inflight = InFlight(grace=2.0, max_age=60.0, clock=lambda: 0.0)
    config = OperatorConfig()
    first = draft(
        reconcilers={"RayCluster": _scale(3)}, snapshot=Snapshot(key=KEY, entries={}, revision=1), now=T0, config=config
    )
    published = inflight.filter(first.batch, applied_floor=0, ids=first.ids())
    whole = first.outcome().batch
    assert published.commands == whole.commands[:-1] and published.id == whole.id
    assert published.suppressed == (whole.commands[-2].id,)  # the second "Scaled up" is the first's twin
    inflight.published(KEY, batch_seq=10)

    later = draft(
        reconcilers={"RayCluster": _scale(5)}, snapshot=Snapshot(key=KEY, entries={}, revision=2), now=T0, config=config
    )
    _CountedIds.encoded = 0
    kept = inflight.filter(later.batch, applied_floor=0, ids=_CountedIds(2))
    decided = later.outcome().batch.commands
    assert kept.commands == decided[6:10]  # w3 and w4, each a create and its Event, with the whole's ids
    assert _CountedIds.encoded == len(decided) - 3  # every command but the three creates still in flight
    assert len(kept.suppressed) == 3 + 3 + 2  # creates and Events of w0..w2, and both "Scaled up"


def test_a_create_is_the_same_as_one_in_flight_by_its_target_alone() -> None:
    from services.reconciler.worker.inflight import in_flight_key

    ref = ObjectRef(api_version="v1", kind="Pod", namespace="ns", name="p")
    other = ObjectRef(api_version="v1", kind="Pod", namespace="ns", name="q")
    a = CreateObject(target=ref, body={"spec": {"image": "ray:1"}})
    b = CreateObject(target=ref, body={"spec": {"image": "ray:2"}})
    assert in_flight_key(a) == in_flight_key(b) != in_flight_key(CreateObject(target=other, body={}))


def test_a_create_after_a_delete_of_the_same_object_is_a_new_create() -> None:
    """A RayJob's retry deletes its submitter Job and creates one of the same name: the first create, still
    remembered, is no twin of the second once the delete was decided."""
    from schema.messages import DeleteCollection, DeleteObject
    from services.reconciler.worker.inflight import InFlight

    inflight = InFlight(grace=2.0, max_age=60.0, clock=lambda: 0.0)
    ref = ObjectRef(api_version="batch/v1", kind="Job", namespace="ns", name="submitter")
    first = CreateObject(target=ref, body={"spec": {"cluster": "a"}})
    retried = CreateObject(target=ref, body={"spec": {"cluster": "b"}})

    def filtered(*commands: Command, seq: int) -> CommandBatch:
        decided = draft(
            reconcilers={"RayJob": lambda s, n, c: Decision(commands=commands)},
            snapshot=Snapshot(key=ReconcileKey(kind="RayJob", namespace="ns", name="j"), entries={}, revision=seq),
            now=T0,
            config=OperatorConfig(),
        )
        batch = inflight.filter(decided.batch, applied_floor=0, ids=decided.ids())
        inflight.published(batch.key, batch_seq=seq)
        return batch

    filtered(first, seq=1)
    assert filtered(retried, seq=2).commands == ()  # the same object while the first is in flight
    filtered(DeleteObject(target=ref), seq=3)
    assert [c.body for c in filtered(retried, seq=4).commands if isinstance(c, CreateObject)] == [retried.body]
    other = msgspec.structs.replace(ref, name="other")
    filtered(msgspec.structs.replace(first, target=other), seq=5)
    again = filtered(DeleteObject(target=other), msgspec.structs.replace(retried, target=other), seq=6)
    assert [type(c) for c in again.commands] == [DeleteObject, CreateObject]  # one decision: delete, create anew
    filtered(msgspec.structs.replace(first, target=other), seq=7)
    suspended = DeleteCollection(api_version="batch/v1", kind="Job", namespace="ns", label_selector="a=b")
    resumed = filtered(suspended, msgspec.structs.replace(retried, target=other), seq=8)
    assert [type(c) for c in resumed.commands] == [DeleteCollection, CreateObject]


def test_a_corrected_create_goes_out_once_the_first_did_not_take_effect() -> None:
    """A create the API server refused (an invalid label in the worker template) will never show: once its
    outcome says so, a create of the same Pod with the corrected body is sent at once, while the same body
    again still waits out the first one's memory (a create that keeps failing is not sent every decision)."""
    from services.reconciler.worker.inflight import InFlight

    clock = [0.0]
    inflight = InFlight(grace=2.0, max_age=60.0, create_hold=10.0, clock=lambda: clock[0])
    ref = ObjectRef(api_version="v1", kind="Pod", namespace="ns", name="c-worker-x")
    refused = CreateObject(target=ref, body={"metadata": {"labels": {"team": "not valid!"}}})
    corrected = CreateObject(target=ref, body={"metadata": {"labels": {"team": "valid"}}})

    def filtered(command: Command, seq: int) -> CommandBatch:
        decided = draft(
            reconcilers={"RayCluster": lambda s, n, c: Decision(commands=(command,))},
            snapshot=Snapshot(key=KEY, entries={}, revision=seq),
            now=T0,
            config=OperatorConfig(),
        )
        batch = inflight.filter(decided.batch, applied_floor=0, entries={}, ids=decided.ids())
        inflight.published(KEY, batch_seq=seq)
        return batch

    (first,) = filtered(refused, seq=1).commands
    assert filtered(corrected, seq=2).commands == ()  # no outcome yet: the Pod may still be created
    inflight.reported(KEY, first.id, took_effect=False)
    clock[0] = 1.0
    assert filtered(refused, seq=3).commands == ()  # the same body again waits
    (sent,) = filtered(corrected, seq=4).commands
    assert isinstance(sent, CreateObject) and sent.body == corrected.body
    assert filtered(corrected, seq=5).commands == ()  # and is in flight itself now


def test_in_flight_memory_expires_when_the_applier_is_stuck() -> None:
    from services.reconciler.worker.inflight import InFlight

    clock = [0.0]
    inflight = InFlight(grace=2.0, max_age=60.0, clock=lambda: clock[0])
    snap = Snapshot(key=KEY, entries={})
    batch = draft(reconcilers={"RayCluster": _create}, snapshot=snap, now=T0, config=OperatorConfig()).outcome().batch
    inflight.filter(batch, applied_floor=0)
    inflight.published(KEY, batch_seq=5)
    clock[0] = 61.0
    assert inflight.filter(batch, applied_floor=0).commands == batch.commands


def test_in_flight_memory_does_not_expire_while_the_applier_works_through_its_queue() -> None:
    from services.reconciler.worker.inflight import InFlight

    clock = [0.0]
    inflight = InFlight(grace=2.0, max_age=60.0, clock=lambda: clock[0])
    snap = Snapshot(key=KEY, entries={})
    batch = draft(reconcilers={"RayCluster": _create}, snapshot=snap, now=T0, config=OperatorConfig()).outcome().batch
    inflight.filter(batch, applied_floor=0)
    inflight.published(KEY, batch_seq=500)
    for floor in range(50, 500, 50):  # the applier acks older batches the whole time
        clock[0] += 30.0
        assert inflight.filter(batch, applied_floor=floor).commands == ()
    clock[0] += 61.0  # then it stops moving: stuck
    assert inflight.filter(batch, applied_floor=450).commands == batch.commands


def test_a_reported_outcome_lands_a_command_while_the_floor_stands_still() -> None:
    from services.reconciler.worker.inflight import InFlight

    clock = [0.0]
    inflight = InFlight(grace=2.0, max_age=60.0, clock=lambda: clock[0])
    snap = Snapshot(key=KEY, entries={})
    batch = draft(reconcilers={"RayCluster": _create}, snapshot=snap, now=T0, config=OperatorConfig()).outcome().batch
    other = ReconcileKey(kind="RayCluster", namespace="ns", name="other")
    inflight.reported(other, "unknown")  # nothing of that key was published here: not remembered
    assert not inflight.tracks(other)
    inflight.filter(batch, applied_floor=0)
    inflight.published(KEY, batch_seq=5)
    clock[0] = 1.0
    inflight.reported(KEY, batch.commands[0].id)  # the floor stays at 0: a slow batch of another key holds it
    clock[0] = 2.5
    assert inflight.filter(batch, applied_floor=0).commands == ()  # applied 1.5 s ago: its grace runs
    inflight.published(KEY, batch_seq=6)
    clock[0] = 3.5
    assert inflight.filter(batch, applied_floor=0).commands == batch.commands  # landed, though the floor is 0
    inflight.published(KEY, batch_seq=7)
    inflight.reported(KEY, batch.commands[0].id)
    clock[0] = 10.0
    inflight.prune(applied_floor=0)
    assert not inflight.tracks(KEY)  # nothing in flight, nothing remembered


def test_one_status_patch_per_object_version_is_in_flight() -> None:
    from schema.messages import PatchStatus
    from services.reconciler.worker.inflight import in_flight_key

    ref = ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace="ns", name="c")
    a = PatchStatus(target=ref, status={"readyWorkerReplicas": 1}, resource_version="7")
    b = PatchStatus(target=ref, status={"readyWorkerReplicas": 2}, resource_version="7")
    c = PatchStatus(target=ref, status={"readyWorkerReplicas": 2}, resource_version="8")
    assert in_flight_key(a) == in_flight_key(b) != in_flight_key(c)


def test_a_withheld_create_is_looked_at_again_once_its_memory_expires() -> None:
    from schema.messages import EmitEvent
    from services.reconciler.worker.inflight import InFlight

    clock = [0.0]
    inflight = InFlight(grace=2.0, max_age=60.0, clock=lambda: clock[0])
    ref = ObjectRef(api_version="v1", kind="Pod", namespace="ns", name="p")
    create = CreateObject(id="c", target=ref, body={})
    event = EmitEvent(id="e", regarding=ref, event_type="Warning", reason="Invalid", message="bad")

    def decided(*commands: Command, seq: int) -> CommandBatch:
        return (
            draft(
                reconcilers={"RayCluster": lambda s, n, c: Decision(commands=commands)},
                snapshot=Snapshot(key=KEY, entries={}),
                now=T0,
                config=OperatorConfig(),
                sequences=[seq],
            )
            .outcome()
            .batch
        )

    inflight.filter(decided(create, event, seq=1), applied_floor=0)
    inflight.published(KEY, batch_seq=10)
    assert inflight.filter(decided(create, event, seq=2), applied_floor=0).commands == ()
    assert not inflight.due(applied_floor=9)  # not applied yet: no look, however long it takes
    clock[0] = 30.0
    assert not inflight.due(applied_floor=10)  # applied: in flight for the grace period
    clock[0] = 32.5
    assert inflight.due(applied_floor=10) == {KEY: None}
    assert not inflight.due(applied_floor=10)  # once

    # A withheld Event alone needs no look; nor does a create the key's latest decision no longer wants.
    inflight.filter(decided(create, event, seq=3), applied_floor=10)
    inflight.published(KEY, batch_seq=11)
    inflight.filter(decided(event, seq=4), applied_floor=10)
    inflight.filter(decided(create, seq=5), applied_floor=10)
    inflight.filter(decided(seq=6), applied_floor=10)
    clock[0] = 100.0
    assert not inflight.due(applied_floor=11)


def test_a_wake_up_waits_for_the_keys_commands_to_land() -> None:
    from services.reconciler.worker.inflight import InFlight

    clock = [0.0]
    inflight = InFlight(grace=2.0, max_age=60.0, clock=lambda: clock[0])
    wake = T0.replace(second=2)
    batch = (
        draft(
            reconcilers={"RayCluster": _create}, snapshot=Snapshot(key=KEY, entries={}), now=T0, config=OperatorConfig()
        )
        .outcome()
        .batch
    )
    assert not inflight.defer(KEY, wake, applied_floor=0)  # nothing in flight: schedule it now
    inflight.filter(batch, applied_floor=0)
    inflight.published(KEY, batch_seq=3)
    assert inflight.defer(KEY, wake, applied_floor=0)
    clock[0] = 20.0
    assert not inflight.due(applied_floor=2)
    assert not inflight.due(applied_floor=3)
    clock[0] = 22.0
    assert inflight.due(applied_floor=3) == {KEY: wake}
    assert not inflight.due(applied_floor=3)

    # A withheld create and a held wake-up of one key: the look now comes first (one tick, not two: a
    # later schedule on the key's timer subject would replace the earlier one).
    inflight.filter(batch, applied_floor=3)
    inflight.published(KEY, batch_seq=4)
    inflight.filter(batch, applied_floor=3)
    assert inflight.defer(KEY, wake, applied_floor=3)
    clock[0] = 30.0
    assert not inflight.due(applied_floor=4)
    clock[0] = 32.5
    assert inflight.due(applied_floor=4) == {KEY: None}

    # A later decision without a wake-up withdraws the held one.
    inflight.filter(batch, applied_floor=4)
    inflight.published(KEY, batch_seq=5)
    assert inflight.defer(KEY, wake, applied_floor=4)
    inflight.filter(msgspec.structs.replace(batch, commands=()), applied_floor=4)
    clock[0] = 100.0
    assert not inflight.due(applied_floor=5)


def test_a_create_stays_in_flight_until_the_snapshot_shows_it() -> None:
    from services.reconciler.worker.inflight import InFlight

    clock = [0.0]
    inflight = InFlight(grace=2.0, max_age=60.0, create_hold=10.0, clock=lambda: clock[0])
    batch = (
        draft(
            reconcilers={"RayCluster": _create}, snapshot=Snapshot(key=KEY, entries={}), now=T0, config=OperatorConfig()
        )
        .outcome()
        .batch
    )
    created = batch.commands[0]
    assert isinstance(created, CreateObject)
    inflight.filter(batch, applied_floor=0, entries={})
    inflight.published(KEY, batch_seq=1)
    clock[0] = 1.0
    assert inflight.filter(batch, applied_floor=1, entries={}).commands == ()  # applied: grace starts
    clock[0] = 5.0  # grace over, but the watch has not shown the object yet: still in flight
    assert inflight.filter(batch, applied_floor=1, entries={}).commands == ()
    clock[0] = 11.5  # hold over, counted from the apply (a create that failed is decided again)
    assert inflight.filter(batch, applied_floor=1, entries={}).commands == batch.commands

    inflight.published(KEY, batch_seq=2)
    clock[0] = 12.0
    shown: dict[str, dict[str, dict[str, Any]]] = {created.target.kind: {created.target.name: {}}}
    assert inflight.filter(batch, applied_floor=2, entries=shown).commands == ()  # shown, within grace
    clock[0] = 14.5
    assert inflight.filter(batch, applied_floor=2, entries={}).commands == batch.commands


def test_a_submitted_job_stays_in_flight_until_the_dashboard_is_seen_to_know_it() -> None:
    """Until the prober's answer shows the job, every reconcile sees "not found" and decides the submit
    again: it is held like a create, at most ``create_hold`` after it was applied."""
    from services.reconciler.worker.inflight import InFlight

    job = ReconcileKey(kind="RayJob", namespace="ns", name="j")
    dashboard = DashboardRef(namespace="ns", service="c-head-svc", port=8265, cluster="c")
    submit = SubmitRayJob(dashboard=dashboard, request={"submission_id": "j-1", "entrypoint": "python x.py"})
    batch = (
        draft(
            reconcilers={"RayJob": lambda s, n, c: Decision(commands=(submit,))},
            snapshot=Snapshot(key=job, entries={}),
            now=T0,
            config=OperatorConfig(),
        )
        .outcome()
        .batch
    )
    not_found = {OBS_RAY_JOB: {"j-1": {"http_status": 404, "error": "not found"}}}
    clock = [0.0]
    inflight = InFlight(grace=2.0, max_age=60.0, create_hold=10.0, clock=lambda: clock[0])
    inflight.filter(batch, applied_floor=0, entries=not_found)
    inflight.published(job, batch_seq=1)
    clock[0] = 1.0
    assert inflight.filter(batch, applied_floor=1, entries=not_found).commands == ()  # applied: grace starts
    clock[0] = 5.0  # grace over, the answer still says 404: held
    assert inflight.filter(batch, applied_floor=1, entries=not_found).commands == ()
    clock[0] = 11.5  # hold over: a submit that failed is decided again
    assert inflight.filter(batch, applied_floor=1, entries=not_found).commands == batch.commands

    inflight.published(job, batch_seq=2)
    clock[0] = 12.0
    known = {OBS_RAY_JOB: {"j-1": {"status": "RUNNING"}}}
    assert inflight.filter(batch, applied_floor=2, entries=known).commands == ()  # shown, within grace
    clock[0] = 14.5
    assert inflight.filter(batch, applied_floor=2, entries=not_found).commands == batch.commands


def _trips_on_shape(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    raise TypeError("'int' object is not subscriptable")


def _has_a_bug(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    raise ZeroDivisionError("division by zero")


@pytest.mark.parametrize(
    ("kind", "rule", "reason"),
    [
        ("RayCluster", "4.1/malformed", "InvalidRayClusterSpec"),
        ("RayJob", "5.1/malformed", "InvalidRayJobSpec"),
        ("RayService", "6.1/malformed", "InvalidRayServiceSpec"),
        ("RayCronJob", "7/malformed", "InvalidRayCronJobSpec"),
    ],
)
def test_a_malformed_custom_resource_of_any_kind_becomes_a_warning_event(kind: str, rule: str, reason: str) -> None:
    key = ReconcileKey(kind=kind, namespace="ns", name="x")  # type: ignore[arg-type]
    obj = {"kind": kind, "metadata": {"name": "x", "namespace": "ns", "uid": "u1"}, "spec": 7}
    snapshot = Snapshot(key=key, entries={kind: {"x": obj}}, revision=3)
    outcome = draft(
        reconcilers={key.kind: _trips_on_shape},
        snapshot=snapshot,
        now=datetime(2026, 1, 1, tzinfo=UTC),
        config=OperatorConfig(),
    ).outcome()
    assert outcome.batch.rules == (rule,)
    (event,) = outcome.batch.commands
    assert isinstance(event, EmitEvent) and event.event_type == "Warning" and event.reason == reason
    assert (event.regarding.kind, event.regarding.name, event.regarding.uid) == (kind, "x", "u1")
    assert "TypeError" in event.message and event.id


def test_a_bug_is_not_taken_for_a_malformed_object() -> None:
    key = ReconcileKey(kind="RayJob", namespace="ns", name="x")
    snapshot = Snapshot(key=key, entries={"RayJob": {"x": {"metadata": {"name": "x"}}}})
    with pytest.raises(ZeroDivisionError):
        draft(
            reconcilers={"RayJob": _has_a_bug},
            snapshot=snapshot,
            now=datetime(2026, 1, 1, tzinfo=UTC),
            config=OperatorConfig(),
        ).outcome()


def test_an_input_is_held_with_only_the_identity_of_its_object() -> None:
    from schema.messages import TimerTick, WatchEvent
    from services.reconciler.worker.reports import identity_only, owner_uid

    pod = {"metadata": {"name": "c", "uid": "u-1", "labels": {"a": "b"}}, "spec": {"containers": [{}]}}
    event = WatchEvent(
        key=KEY, event_type="ADDED", entry_kind="RayCluster", object=pod, resource_version="1", observed_at=T0
    )
    held = identity_only(event)
    assert held.object == {"metadata": {"name": "c", "uid": "u-1"}}  # type: ignore[union-attr]
    assert owner_uid(KEY, [held]) == owner_uid(KEY, [event]) == "u-1"
    assert msgspec.structs.replace(held, object=pod) == event  # nothing else of the input changed
    odd = msgspec.structs.replace(event, object={"metadata": ["x"]})
    assert identity_only(odd).object == {"metadata": {}}  # type: ignore[union-attr]
    tick = TimerTick(key=KEY, due_at=T0)
    assert identity_only(tick) is tick


def test_the_event_of_a_create_or_delete_goes_out_with_it() -> None:
    """A worker deleted and created again under the same name while the batch of its first create is held
    (another Pod of that batch not shown yet) is announced again, and so is its next delete (another uid,
    the same Event); a create withheld as in flight is not."""
    from schema.messages import DeleteObject
    from services.reconciler.worker.inflight import InFlight

    inflight = InFlight(grace=2.0, max_age=60.0, create_hold=10.0, clock=lambda: 0.0)
    pods = [ObjectRef(api_version="v1", kind="Pod", namespace="ns", name=f"c-worker-{n}") for n in ("a", "b")]
    owner = ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace="ns", name="c")

    def event(reason: str, message: str) -> EmitEvent:
        return EmitEvent(regarding=owner, event_type="Normal", reason=reason, message=message)

    def created(ref: ObjectRef) -> tuple[Command, Command]:
        return CreateObject(target=ref, body={}), event("CreatedWorkerPod", f"Created worker Pod ns/{ref.name}")

    def deleted(ref: ObjectRef, uid: str) -> tuple[Command, Command]:
        message = f"Deleted worker Pod ns/{ref.name}; scale-down"
        return DeleteObject(target=msgspec.structs.replace(ref, uid=uid)), event("DeletedWorkerPod", message)

    def filtered(*commands: Command, seq: int, shown: tuple[ObjectRef, ...] = ()) -> list[type]:
        decided = draft(
            reconcilers={"RayCluster": lambda s, n, c: Decision(commands=commands)},
            snapshot=Snapshot(key=KEY, entries={}, revision=seq),
            now=T0,
            config=OperatorConfig(),
        )
        entries: dict[str, dict[str, Any]] = {"Pod": {ref.name: {} for ref in shown}}
        batch = inflight.filter(decided.batch, applied_floor=0, entries=entries, ids=decided.ids())
        inflight.published(KEY, batch_seq=seq)
        return [type(c) for c in batch.commands]

    assert filtered(*created(pods[0]), *created(pods[1]), seq=1) == [CreateObject, EmitEvent] * 2
    assert filtered(*created(pods[0]), seq=2) == []  # decided again before it shows: both withheld
    assert filtered(*deleted(pods[0], "u1"), seq=3, shown=(pods[0],)) == [DeleteObject, EmitEvent]
    assert filtered(*created(pods[0]), seq=4) == [CreateObject, EmitEvent]  # created anew, announced anew
    assert filtered(*deleted(pods[0], "u2"), seq=5, shown=(pods[0],)) == [DeleteObject, EmitEvent]
    assert filtered(*deleted(pods[0], "u2"), seq=6) == []  # the same delete again: withheld with its Event
    assert filtered(*created(pods[1]), seq=7) == []  # still in flight, with its Event
