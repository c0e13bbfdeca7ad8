"""The reconciler worker against a real nats-server: partitions, ack-after-publish, dead letters,
timers, and two workers sharing partitions. Reconcile functions here are small pure test doubles of a
kind's logic; NATS is real."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from datetime import UTC, datetime, timedelta

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.js.api import ConsumerInfo

from schema import subjects
from schema.codec import decode_batch, decode_deadletter, decode_input, encode
from schema.config import OperatorConfig
from schema.decision import Decision, ReconcileFn, Snapshot
from schema.keys import KeyKind, ReconcileKey
from schema.messages import (
    BACKSTOP,
    RESYNC,
    CommandBatch,
    CommandResult,
    CreateObject,
    DeadLetter,
    EmitEvent,
    ObjectRef,
    TimerTick,
    WatchEvent,
    WatchEventType,
)
from services.reconciler.worker.service import run_reconciler
from services.reconciler.worker.timers import schedule_header
from services.runtime.health import HealthServer
from services.runtime.settings import BusSettings, NatsSettings, PartitionSettings, RaybusSettings
from services.runtime.topology import ensure_topology
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually, stored_messages

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def create_one_pod(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    """Create ``<name>-pod`` when the CR exists and the pod does not (level-based, idempotent)."""
    owner = snapshot.owner()
    if owner is None or snapshot.get("Pod", f"{snapshot.key.name}-pod") is not None:
        return Decision()
    target = ObjectRef(api_version="v1", kind="Pod", namespace=snapshot.key.namespace, name=f"{snapshot.key.name}-pod")
    wake = owner.get("wake")
    return Decision(
        commands=(CreateObject(target=target, body={"metadata": {"name": target.name}}),),
        wake_at=now + timedelta(seconds=float(wake)) if wake is not None else None,
    )


def settings_for(server: NatsServer, *, worker_id: str, partitions: int = 4) -> RaybusSettings:
    return RaybusSettings(
        nats=NatsSettings(url=server.url),
        bus=BusSettings(partitions=partitions, ack_wait=5.0, max_deliver=3),
        partitions=PartitionSettings(worker_id=worker_id, lease_ttl=3.0, renew_interval=0.5, exit_timeout=5.0),
    )


class Worker:
    """A reconciler worker running as a task in this test."""

    def __init__(self, settings: RaybusSettings, reconcilers: dict[KeyKind, ReconcileFn]) -> None:
        self.stop = asyncio.Event()
        self.health = HealthServer(host="127.0.0.1", port=0)
        self.task = asyncio.create_task(run_reconciler(settings, self.stop, self.health, reconcilers=reconcilers))

    async def close(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 30)


@pytest.fixture
async def client(nats_server: NatsServer) -> AsyncIterator[Client]:
    nc = await nats.connect(nats_server.url)
    await ensure_topology(
        nc, bus=BusSettings(partitions=4, ack_wait=5.0, max_deliver=3), partitions=PartitionSettings()
    )
    try:
        yield nc
    finally:
        await nc.close()


async def put_cr(
    nc: Client,
    key: ReconcileKey,
    body: Mapping[str, object] | None = None,
    *,
    event_type: WatchEventType = "ADDED",
    status_only: bool = False,
) -> None:
    """Project a CR into KV and publish its watch event, as the watcher does."""
    kv = await nc.jetstream().key_value(subjects.OBJECTS_BUCKET)
    obj = {"metadata": {"name": key.name, "namespace": key.namespace}, **(body or {})}
    revision = await kv.put(subjects.entry_key(key, key.kind, key.name), msgspec.json.encode(obj))
    event = WatchEvent(
        key=key,
        event_type=event_type,
        entry_kind=key.kind,
        object=obj,
        resource_version=str(revision),
        observed_at=T0,
        kv_revision=revision,
        status_only=status_only,
    )
    await nc.jetstream().publish(subjects.events_subject(key), encode(event))


async def decisions(nc: Client) -> list[CommandBatch]:
    """Every decision recorded, in order."""
    js = nc.jetstream()
    info = await js.stream_info(subjects.COMMANDS_STREAM)
    if info.state.messages == 0:
        return []
    found = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        found.append(decode_batch((await js.get_msg(subjects.COMMANDS_STREAM, seq)).data or b""))
    return found


async def batches(nc: Client) -> list[CommandBatch]:
    js = nc.jetstream()
    info = await js.stream_info(subjects.COMMANDS_STREAM)
    found = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        if info.state.messages == 0:
            break
        msg = await js.get_msg(subjects.COMMANDS_STREAM, seq)
        batch = decode_batch(msg.data or b"")
        if batch.commands:  # every decision is recorded; these tests count the ones that act
            found.append(batch)
    return found


async def last_dead_letter(nc: Client) -> DeadLetter:
    js = nc.jetstream()
    subject = subjects.deadletter_subject(subjects.EVENTS_STREAM)
    msg = await eventually(lambda: js.get_last_msg(subjects.DEADLETTER_STREAM, subject), timeout=30)
    return decode_deadletter(msg.data or b"")


def key(n: int) -> ReconcileKey:
    return ReconcileKey(kind="RayCluster", namespace="default", name=f"c{n}")


async def test_a_held_key_is_decided_on_the_write_its_event_carries_not_on_a_read(
    nats_server: NatsServer, client: Client
) -> None:
    worker = Worker(settings_for(nats_server, worker_id="w1"), {"RayCluster": create_one_pod})
    kv = await client.jetstream().key_value(subjects.OBJECTS_BUCKET)
    try:
        await put_cr(client, key(0))
        first = await eventually(lambda: _at_least(decisions(client), 1), timeout=30)
        created = await kv.get(subjects.entry_key(key(0), key(0).kind, key(0).name))
        # The event says the write was the Pod c0-pod; the bucket got another entry. Only a decision on the
        # event's object sees c0-pod: one on a read would decide its create again (withheld as in flight).
        pod = {"metadata": {"name": "c0-pod", "namespace": "default"}}
        revision = await kv.put(subjects.entry_key(key(0), "Pod", "c0-other"), msgspec.json.encode(pod))
        event = WatchEvent(
            key=key(0),
            event_type="ADDED",
            entry_kind="Pod",
            object=pod,
            resource_version="2",
            observed_at=T0,
            kv_revision=revision,
            kv_previous=created.revision,
        )
        await client.jetstream().publish(subjects.events_subject(key(0)), encode(event))
        found = await eventually(lambda: _at_least(decisions(client), len(first) + 1), timeout=30)
        assert found[-1].key == key(0) and found[-1].snapshot_revision == revision
        assert not found[-1].commands and not found[-1].suppressed
    finally:
        await worker.close()


async def test_each_input_yields_one_batch_and_is_acked(nats_server: NatsServer, client: Client) -> None:
    worker = Worker(settings_for(nats_server, worker_id="w1"), {"RayCluster": create_one_pod})
    try:
        for n in range(20):
            await put_cr(client, key(n))
        found = await eventually(lambda: _at_least(batches(client), 20), timeout=30)
        assert {b.key for b in found} == {key(n) for n in range(20)}
        js = client.jetstream()

        async def all_acked() -> bool:
            pending = 0
            for p in range(4):
                info = await js.consumer_info(subjects.EVENTS_STREAM, subjects.partition_consumer(p))
                pending += info.num_pending + info.num_ack_pending
            return pending == 0

        await eventually(all_acked, timeout=30)
    finally:
        await worker.close()


async def _at_least(coro: Awaitable[list[CommandBatch]], n: int) -> list[CommandBatch]:
    found = await coro
    return found if len(found) >= n else []


async def test_garbage_goes_to_dead_letters_and_partition_keeps_flowing(
    nats_server: NatsServer, client: Client
) -> None:
    worker = Worker(settings_for(nats_server, worker_id="w1"), {"RayCluster": create_one_pod})
    try:
        bad_key = key(1)
        await client.jetstream().publish(subjects.events_subject(bad_key), b"{not json")
        await put_cr(client, bad_key)
        await eventually(lambda: _at_least(batches(client), 1), timeout=30)
        js = client.jetstream()
        msg = await eventually(
            lambda: js.get_last_msg(subjects.DEADLETTER_STREAM, subjects.deadletter_subject(subjects.EVENTS_STREAM)),
            timeout=30,
        )
        letter = decode_deadletter(msg.data or b"")
        assert letter.payload == b"{not json"
        assert "undecodable input" in letter.error
        assert letter.stream == subjects.EVENTS_STREAM
    finally:
        await worker.close()


async def test_failing_reconcile_is_retried_then_dead_lettered(nats_server: NatsServer, client: Client) -> None:
    def broken(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
        if snapshot.key.name == "c1":
            raise ZeroDivisionError("boom")
        return create_one_pod(snapshot, now, config)

    worker = Worker(settings_for(nats_server, worker_id="w1"), {"RayCluster": broken})
    try:
        await put_cr(client, key(1), {"metadata": {"name": key(1).name, "namespace": "default", "uid": "uid-c1"}})
        await put_cr(client, key(2))
        js = client.jetstream()
        msg = await eventually(
            lambda: js.get_last_msg(subjects.DEADLETTER_STREAM, subjects.deadletter_subject(subjects.EVENTS_STREAM)),
            timeout=30,
        )
        letter = decode_deadletter(msg.data or b"")
        assert "ZeroDivisionError: boom" in letter.error
        assert letter.deliveries == 3

        async def with_report() -> list[CommandBatch]:
            # The report is published after the dead letter is stored: wait for it, not for time.
            found = await batches(client)
            return found if any(b.report for b in found) else []

        found = await eventually(with_report, timeout=30)
        assert [b.key for b in found if not b.report] == [key(2)]
        (report,) = [b for b in found if b.report]
        assert report.key == key(1) and "ZeroDivisionError: boom" in report.report
        assert [(c.event_type, c.reason) for c in report.commands] == [("Warning", "FailedToReconcile")]  # type: ignore[union-attr]
        assert report.commands[0].regarding.uid == "uid-c1"  # type: ignore[union-attr]  # named from the input

        async def resync_armed() -> bool:
            # what failed may be fixed by then: the key is tried again at its resync
            msg = await js.get_last_msg(subjects.EVENTS_STREAM, subjects.timer_subject(key(1)))
            tick = decode_input(msg.data or b"")
            return isinstance(tick, TimerTick) and tick.reason == RESYNC

        await eventually(resync_armed, timeout=30)
    finally:
        await worker.close()


async def test_a_bus_that_does_not_answer_never_uses_up_an_inputs_deliveries(
    nats_server: NatsServer, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    js = client.jetstream()
    worker = Worker(settings_for(nats_server, worker_id="w1"), {"RayCluster": create_one_pod})
    try:
        await put_cr(client, key(2))
        await eventually(lambda: batches(client), timeout=30, message="the worker deciding")
        await js.delete_stream(subjects.COMMANDS_STREAM)  # every publish of a decision now finds no stream
        await put_cr(client, key(1))

        def bus_failures() -> int:
            return sum("the bus failed the reconcile of" in r.getMessage() for r in caplog.records)

        await eventually(lambda: bus_failures() > 3, timeout=60, message="more bus failures than max_deliver")
        await ensure_topology(
            client, bus=BusSettings(partitions=4, ack_wait=5.0, max_deliver=3), partitions=PartitionSettings()
        )
        found = await eventually(lambda: batches(client), timeout=30, message="the decision, once the bus answers")
        assert [b.key for b in found] == [key(1)]  # the stream made anew holds only what came after
        consumer = subjects.partition_consumer(subjects.partition_of(key(1), 4))

        async def settled() -> bool:
            info: ConsumerInfo = await js.consumer_info(subjects.EVENTS_STREAM, consumer)
            return info.num_ack_pending == 0

        await eventually(settled, timeout=30, message="the input acked")
        info = await js.consumer_info(subjects.EVENTS_STREAM, consumer)
        assert info.num_redelivered == 0  # tried again in place, never redelivered
        assert (await js.stream_info(subjects.DEADLETTER_STREAM)).state.messages == 0
    finally:
        await worker.close()


async def test_wake_at_becomes_a_timer_tick(nats_server: NatsServer, client: Client) -> None:
    seen: list[datetime] = []

    def remember(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
        seen.append(now)
        return Decision(wake_at=now + timedelta(seconds=1)) if len(seen) == 1 else Decision()

    worker = Worker(settings_for(nats_server, worker_id="w1"), {"RayCluster": remember})
    try:
        await put_cr(client, key(1))
        await eventually(lambda: len(seen) >= 2, timeout=30)
        assert seen[1] == T0 + timedelta(seconds=1)  # the tick's `now` is its due time
    finally:
        await worker.close()


async def test_a_wake_up_no_longer_wanted_is_withdrawn(nats_server: NatsServer, client: Client) -> None:
    """A decision asks for a tick in 2 s; the next decision (another event) asks for none: the pending
    tick is replaced by the key's resync, so nothing wakes the key at the first one's due time."""
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    seen: list[datetime] = []

    def once(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
        seen.append(now)
        return Decision(wake_at=due) if len(seen) == 1 else Decision()

    resync = settings_for(nats_server, worker_id="w1").partitions.resync_period
    worker = Worker(settings_for(nats_server, worker_id="w1"), {"RayCluster": once})
    try:
        await put_cr(client, key(1))
        await eventually(lambda: len(seen) == 1, timeout=30)
        await put_cr(client, key(1), {"spec": {"changed": True}})
        await eventually(lambda: len(seen) == 2, timeout=30)
        msg = await client.jetstream().get_last_msg(subjects.EVENTS_STREAM, subjects.timer_subject(key(1)))
        # the schedule was superseded by the key's resync, half a resync period away at the earliest
        tick = decode_input(msg.data or b"")
        assert isinstance(tick, TimerTick) and tick.reason == RESYNC
        assert tick.due_at >= due + timedelta(seconds=resync / 2 - 10)
        await eventually(lambda: datetime.now(UTC) > due + timedelta(seconds=1), timeout=30)
        await put_cr(client, key(1), {"spec": {"changed": "again"}})  # an input after the due time
        await eventually(lambda: len(seen) == 3, timeout=30)
        assert due not in seen  # no tick came in between
    finally:
        await worker.close()


async def test_a_tick_just_due_is_not_replaced_by_a_later_one(client: Client) -> None:
    """A later schedule on a key's timer subject replaces the pending one; a look asked for "now" (due
    times round up to the second) must still arrive when a later wake-up is asked right after it."""
    from services.reconciler.worker.timers import TimerScheduler

    timers = TimerScheduler(client.jetstream())
    sub = await client.jetstream().subscribe(">", stream=subjects.EVENTS_STREAM, ordered_consumer=True)
    now = datetime.now(UTC)
    assert await timers.schedule(key(7), now, reason="look")
    assert not await timers.schedule(key(7), now + timedelta(minutes=5), reason="requeue")
    tick = decode_input((await sub.next_msg(timeout=10)).data)  # the stream holds nothing else
    assert isinstance(tick, TimerTick) and (tick.key, tick.reason) == (key(7), "look")
    await sub.unsubscribe()


async def test_a_backstop_whose_memory_emptied_gives_way_to_a_later_wake_up(client: Client) -> None:
    """A pending backstop normally stays when a later wake-up is asked (an earlier tick is pending);
    once the memory it stood behind holds nothing, the later wake-up replaces it instead of the key being
    reconciled at the backstop's time for nothing."""
    from services.reconciler.worker.timers import TimerScheduler

    timers = TimerScheduler(client.jetstream())
    now = datetime.now(UTC)
    assert await timers.backstop(key(8), now + timedelta(minutes=1))
    assert not await timers.schedule(key(8), now + timedelta(minutes=5))
    assert await timers.schedule(key(8), now + timedelta(minutes=5), over_backstop=True)
    pending = await client.jetstream().get_last_msg(subjects.EVENTS_STREAM, subjects.timer_subject(key(8)))
    assert (pending.headers or {})["Nats-Schedule"] == schedule_header(now + timedelta(minutes=5))
    assert decode_input(pending.data or b"").reason == ""  # type: ignore[union-attr]


async def test_a_held_wake_up_survives_its_worker(nats_server: NatsServer, client: Client) -> None:
    """A wake-up held while the key's create is in flight (no applier here: nothing is ever applied)
    lives in the worker's memory; a durable backstop tick brings it to the next owner of the partition."""
    seen: list[datetime] = []

    def create_and_wake(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
        seen.append(now)
        decided = create_one_pod(snapshot, now, config)
        return msgspec.structs.replace(decided, wake_at=now + timedelta(seconds=1)) if len(seen) == 1 else Decision()

    quick = PartitionSettings(worker_id="w1", lease_ttl=3.0, renew_interval=0.5, exit_timeout=5.0, inflight_max_age=4.0)
    first = Worker(
        dataclasses.replace(settings_for(nats_server, worker_id="w1"), partitions=quick),
        {"RayCluster": create_and_wake},
    )
    await put_cr(client, key(1))
    await eventually(lambda: len(seen) == 1, timeout=30)
    await first.close()
    second = Worker(settings_for(nats_server, worker_id="w2"), {"RayCluster": create_and_wake})
    try:
        await eventually(lambda: len(seen) == 2, timeout=30)  # the backstop tick, ~4 s after the decision
    finally:
        await second.close()


async def test_a_wake_up_waits_for_its_commands_outcome_not_for_the_partitions_floor(
    nats_server: NatsServer, client: Client
) -> None:
    """No applier consumes here, so the partition's ack floor never moves (as when another key's slow batch
    holds it). The outcome the applier publishes for the key's command is what lets its held wake-up go."""
    seen: list[datetime] = []
    regarding = ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace="default", name="c1")

    def announce_and_wake(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
        seen.append(now)
        event = EmitEvent(regarding=regarding, event_type="Normal", reason="Looked", message="looked")
        return Decision(commands=(event,), wake_at=now + timedelta(seconds=1)) if len(seen) == 1 else Decision()

    # Memory that would hold the wake-up for ten minutes if only the floor could release it.
    patient = PartitionSettings(
        worker_id="w1", lease_ttl=3.0, renew_interval=0.5, exit_timeout=5.0, inflight_max_age=600.0
    )
    worker = Worker(
        dataclasses.replace(settings_for(nats_server, worker_id="w1"), partitions=patient),
        {"RayCluster": announce_and_wake},
    )
    try:
        await put_cr(client, key(1))
        (first,) = await eventually(lambda: _at_least(batches(client), 1), timeout=30)
        (command,) = first.commands
        result = CommandResult(
            batch_id=first.id,
            command_id=command.id,
            key=key(1),
            verb="emit_event",
            target="Event",
            outcome="applied",
            at=T0,
        )
        await client.jetstream().publish(subjects.result_subject(key(1)), encode(result))
        await eventually(lambda: len(seen) >= 2, timeout=30)
        assert seen[1] == T0 + timedelta(seconds=1)  # the held wake-up, at its time
    finally:
        await worker.close()


async def test_a_backstop_tick_reaching_the_worker_that_holds_the_wake_up_is_answered_without_a_reconcile(
    nats_server: NatsServer, client: Client
) -> None:
    """A backstop stands behind memory that may be lost; the worker that still holds the key's wake-up
    (its create is in flight: no applier here) acks the tick, reconciles nothing and arms the backstop
    again, so it still stands if the worker goes later."""
    seen: list[datetime] = []

    def create_and_wake(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
        seen.append(now)
        decided = create_one_pod(snapshot, now, config)
        return msgspec.structs.replace(decided, wake_at=now + timedelta(seconds=1))

    worker = Worker(settings_for(nats_server, worker_id="w1"), {"RayCluster": create_and_wake})
    js = client.jetstream()
    try:
        await put_cr(client, key(1))
        await eventually(lambda: len(seen) == 1, timeout=30)
        # The backstop is published after the decision: on a loaded machine it may not be there yet.
        armed = await eventually(lambda: js.get_last_msg(subjects.EVENTS_STREAM, subjects.timer_subject(key(1))))
        armed_tick = decode_input(armed.data or b"")
        assert isinstance(armed_tick, TimerTick) and armed_tick.reason == BACKSTOP
        # The backstop fires now rather than in a minute: the same schedule, due at once.
        due = datetime.now(UTC)
        tick = TimerTick(key=key(1), due_at=due, reason=BACKSTOP)
        await js.publish(
            subjects.timer_subject(key(1)),
            encode(tick),
            headers={"Nats-Schedule": schedule_header(due), "Nats-Schedule-Target": subjects.events_subject(key(1))},
        )

        async def fired() -> int | None:
            last = await js.get_last_msg(subjects.EVENTS_STREAM, subjects.stored_events_filter(key(1)))
            return last.seq if isinstance(decode_input(last.data or b""), TimerTick) else None

        tick_seq = await eventually(fired, timeout=30)
        consumer = subjects.partition_consumer(subjects.partition_of(key(1), 4))

        async def tick_acked() -> bool:
            info = await js.consumer_info(subjects.EVENTS_STREAM, consumer)
            return info.ack_floor is not None and info.ack_floor.stream_seq >= tick_seq

        await eventually(tick_acked, timeout=30)
        rearmed = await js.get_last_msg(subjects.EVENTS_STREAM, subjects.timer_subject(key(1)))
        assert rearmed.seq is not None and armed.seq is not None  # a stored message has its sequence
        assert rearmed.seq > armed.seq and "Nats-Schedule" in (rearmed.headers or {})
        rearmed_tick = decode_input(rearmed.data or b"")
        assert isinstance(rearmed_tick, TimerTick) and rearmed_tick.reason == BACKSTOP
        assert len(seen) == 1  # no reconcile of the tick
    finally:
        await worker.close()


async def test_two_workers_split_partitions_and_hand_over(nats_server: NatsServer, client: Client) -> None:
    s1 = settings_for(nats_server, worker_id="w1")
    s2 = settings_for(nats_server, worker_id="w2")
    w1 = Worker(s1, {"RayCluster": create_one_pod})
    w2 = Worker(s2, {"RayCluster": create_one_pod})
    try:
        kv = await client.jetstream().key_value(subjects.LEASES_BUCKET)

        async def owners() -> dict[int, str]:
            found = {}
            for p in range(4):
                try:
                    found[p] = (await kv.get(subjects.lease_key("reconcile", p))).value.decode()  # type: ignore[union-attr]
                except Exception:
                    pass
            return found

        async def split() -> bool:
            o = await owners()
            return len(o) == 4 and set(o.values()) == {"w1", "w2"}

        await eventually(split, timeout=30)
        await w1.close()

        async def all_w2() -> bool:
            o = await owners()
            return len(o) == 4 and set(o.values()) == {"w2"}

        await eventually(all_w2, timeout=30)
        for n in range(10):
            await put_cr(client, key(n))
        await eventually(lambda: _at_least(batches(client), 10), timeout=30)
    finally:
        await w2.close()
        if not w1.task.done():
            await w1.close()


def test_settings_are_plain_data() -> None:
    s = RaybusSettings()
    assert dataclasses.replace(s.bus, partitions=8).partitions == 8


async def test_a_decision_taken_past_the_lease_is_dropped_and_its_input_decided_again(
    nats_server: NatsServer, client: Client
) -> None:
    """A worker starved past its lease (here: a reconcile that holds the event loop longer than the lease
    lives, while another worker claims the partition) no longer owns the partition when it is done
    deciding: it publishes nothing and hands the input back, so a key never gets decisions from two workers
    at once. (Had nobody claimed it, its renewal could still succeed, and the decision would be safe.)"""
    settings = settings_for(nats_server, worker_id="w1")
    calls: list[str] = []

    def claimed_by_another() -> None:
        """What another worker does meanwhile: the lease expires, and it claims the partition."""

        async def claim() -> None:
            nc = await nats.connect(nats_server.url)
            try:
                kv = await nc.jetstream().key_value(subjects.LEASES_BUCKET)
                lease = subjects.lease_key("reconcile", subjects.partition_of(key(0), 4))
                await kv.purge(lease)
                await kv.create(lease, b"w2")
            finally:
                await nc.close()

        asyncio.run(claim())

    def starved_once(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
        name = "starved" if not calls else "fresh"
        calls.append(name)
        if name == "starved":
            other = threading.Thread(target=claimed_by_another)
            other.start()
            time.sleep(settings.partitions.lease_ttl + 1.0)  # stands in for a process that got no CPU
            other.join()
        target = ObjectRef(api_version="v1", kind="Pod", namespace=snapshot.key.namespace, name=name)
        return Decision(commands=(CreateObject(target=target, body={"metadata": {"name": name}}),))

    worker = Worker(settings, {"RayCluster": starved_once})
    try:
        await put_cr(client, key(0))
        found = await eventually(lambda: _at_least(batches(client), 1), timeout=60)
        names = [c.target.name for b in found for c in b.commands if isinstance(c, CreateObject)]
        assert names == ["fresh"] and calls[0] == "starved"
    finally:
        await worker.close()


async def test_every_live_key_is_decided_again_without_events_and_a_quiet_resync_is_not_recorded(
    nats_server: NatsServer, client: Client
) -> None:
    """Resync: with no event at all, the key is decided again and again (within the period each time); a
    resync that has nothing to do publishes no batch; once its resource is gone the key is left alone."""
    seen: list[datetime] = []

    def note(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
        seen.append(now)
        return create_one_pod(snapshot, now, config) if len(seen) == 1 else Decision()

    base = settings_for(nats_server, worker_id="w1")
    fast = dataclasses.replace(base, partitions=dataclasses.replace(base.partitions, resync_period=3.0))
    worker = Worker(fast, {"RayCluster": note})
    try:
        await put_cr(client, key(1))
        await eventually(lambda: len(seen) >= 4, timeout=60, message="three resyncs without any event")
        filtered = subjects.stored_events_filter(key(1))
        stored = await stored_messages(client.jetstream(), subjects.EVENTS_STREAM, filtered)
        inputs = [decode_input(m.data) for m in stored]
        ticks = [m for m in inputs if isinstance(m, TimerTick)]
        assert len(ticks) >= 3 and {t.reason for t in ticks} == {RESYNC}
        recorded = [decode_batch(m.data) for m in await stored_messages(client.jetstream(), subjects.COMMANDS_STREAM)]
        assert len(recorded) == 1 and recorded[0].commands  # only the first decision, which acted

        kv = await client.jetstream().key_value(subjects.OBJECTS_BUCKET)
        await kv.delete(subjects.entry_key(key(1), "RayCluster", "c1"))  # before its event: no revision to wait for
        gone = WatchEvent(
            key=key(1),
            event_type="DELETED",
            entry_kind="RayCluster",
            object={"metadata": {"name": "c1", "namespace": "default"}},
            resource_version="9",
            observed_at=T0,
        )
        await client.jetstream().publish(subjects.events_subject(key(1)), encode(gone))

        async def withdrawn() -> bool:
            msg = await client.jetstream().get_last_msg(subjects.EVENTS_STREAM, subjects.timer_subject(key(1)))
            return not msg.data  # the pending resync superseded by an empty message: nothing left to fire

        await eventually(withdrawn, timeout=30, message="the resync of a deleted key withdrawn")
    finally:
        await worker.close()


async def test_an_empty_decision_on_the_echo_of_a_status_write_is_not_recorded(
    nats_server: NatsServer, client: Client
) -> None:
    """The key is decided on a change of its own status alone, and the decision, having nothing to do, is not
    recorded; an ordinary event's empty decision is."""
    seen: list[datetime] = []

    def note(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
        seen.append(now)
        return create_one_pod(snapshot, now, config) if len(seen) == 1 else Decision()

    async def modified(*, status_only: bool) -> None:
        status = {"status": {"state": f"s{len(seen)}"}}
        await put_cr(client, key(2), status, event_type="MODIFIED", status_only=status_only)

    async def acked() -> bool:
        js = client.jetstream()
        for p in range(4):
            info = await js.consumer_info(subjects.EVENTS_STREAM, subjects.partition_consumer(p))
            if info.num_pending or info.num_ack_pending:
                return False
        return True

    worker = Worker(settings_for(nats_server, worker_id="w1"), {"RayCluster": note})
    try:
        await put_cr(client, key(2))
        await eventually(lambda: _at_least(decisions(client), 1), timeout=30)
        await modified(status_only=True)
        await eventually(lambda: len(seen) >= 2, timeout=30, message="no decision on the status change")
        await eventually(acked, timeout=30, message="the status change never acknowledged")
        assert len(await decisions(client)) == 1
        await modified(status_only=False)
        recorded = await eventually(lambda: _at_least(decisions(client), 2), timeout=30)
        assert len(seen) == 3 and not recorded[-1].commands
    finally:
        await worker.close()
