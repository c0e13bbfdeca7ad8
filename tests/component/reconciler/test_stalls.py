"""Undecided keys are shown: a real nats-server, inputs that no reconciler decides."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import nats
import pytest
from nats.aio.client import Client

from schema import subjects
from schema.codec import decode_batch, encode
from schema.keys import ReconcileKey
from schema.messages import RESYNC, CommandBatch, EmitEvent, TimerTick, WatchEvent
from services.reconciler.worker.stalls import STALLED_REASON, Stall, StallWatch
from services.runtime.bus import publish
from services.runtime.settings import BusSettings, PartitionSettings
from services.runtime.topology import ensure_topology
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually, stored_messages

PARTITIONS = 4
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
async def client(nats_server: NatsServer) -> AsyncIterator[Client]:
    nc = await nats.connect(nats_server.url)
    await ensure_topology(nc, bus=BusSettings(partitions=PARTITIONS), partitions=PartitionSettings())
    try:
        yield nc
    finally:
        await nc.close()


def key(name: str) -> ReconcileKey:
    return ReconcileKey(kind="RayCluster", namespace="default", name=name)


async def event(nc: Client, k: ReconcileKey) -> int:
    """Publish a watch event of ``k``'s RayCluster; returns its sequence in the events stream."""
    message = WatchEvent(
        key=k,
        event_type="MODIFIED",
        entry_kind="RayCluster",
        object={"metadata": {"name": k.name, "namespace": k.namespace, "uid": f"uid-{k.name}"}},
        resource_version="1",
        observed_at=T0,
    )
    ack = await nc.jetstream().publish(subjects.events_subject(k), encode(message))
    return ack.seq


async def test_inputs_no_decision_names_are_shown_once_on_their_resource(client: Client) -> None:
    stalled, decided, idle = key("stalled"), key("decided"), key("idle")
    await event(client, stalled)
    seq = await event(client, decided)
    # a decision that names the input (stored, its input not acknowledged yet: the floor lags)
    batch = CommandBatch(id="decision", key=decided, issued_at=T0, commands=(), inputs=(seq,))
    await publish(client.jetstream(), subjects.command_subject(decided), encode(batch), msg_id=batch.id)
    tick = TimerTick(key=idle, due_at=T0, reason=RESYNC)  # a resync brings no new input
    await client.jetstream().publish(subjects.events_subject(idle), encode(tick))

    watch = StallWatch(client, partitions=PARTITIONS, stall_after=0.5)

    async def stuck() -> list[Stall]:
        found = await watch.look()
        return found if all(s.stuck for s in found) and found else []

    # first seen undecided; stuck once its partition has not moved for the bound either
    found = await eventually(stuck, timeout=30, message="the undecided input found, its partition stuck")
    assert [s.key for s in found] == [stalled]
    assert found[0].uid == "uid-stalled"

    await watch.report(found)
    await watch.report(found)  # every replica looks: the Event is published once
    filtered = subjects.stored_commands_filter(stalled)
    stored = await stored_messages(client.jetstream(), subjects.COMMANDS_STREAM, filtered)
    (report,) = [decode_batch(m.data) for m in stored]
    (command,) = report.commands
    assert report.report and isinstance(command, EmitEvent)
    assert (command.event_type, command.reason, command.regarding.uid) == ("Warning", STALLED_REASON, "uid-stalled")
    assert [s.seq for s in await watch.look()] == [found[0].seq]  # its own report is no decision


async def test_a_partition_that_moves_is_behind_not_stuck(client: Client) -> None:
    """Its waiting inputs count as undecided, but get no Event: their decisions come in their turn."""
    first = key("first")
    second = next(
        k
        for k in (key(f"second-{n}") for n in range(1000))
        if subjects.partition_of(k, PARTITIONS) == subjects.partition_of(first, PARTITIONS)
    )
    await event(client, first)
    await event(client, second)
    watch = StallWatch(client, partitions=PARTITIONS, stall_after=0.5)
    await eventually(watch.look, timeout=30, message="both inputs undecided past the bound")
    partition = subjects.partition_of(first, PARTITIONS)
    sub = await client.jetstream().pull_subscribe_bind(
        durable=subjects.partition_consumer(partition), stream=subjects.EVENTS_STREAM
    )
    try:
        (msg,) = await sub.fetch(1, timeout=5)
        await msg.ack_sync()  # the partition moves on: first decided
    finally:
        await sub.unsubscribe()
    (waiting,) = await watch.look()
    assert waiting.key == second and not waiting.stuck
    await watch.report([waiting])
    filtered = subjects.stored_commands_filter(second)
    assert await stored_messages(client.jetstream(), subjects.COMMANDS_STREAM, filtered) == []


async def test_nothing_is_shown_while_every_input_is_decided(client: Client) -> None:
    watch = StallWatch(client, partitions=PARTITIONS, stall_after=0.5)
    assert await watch.look() == []
