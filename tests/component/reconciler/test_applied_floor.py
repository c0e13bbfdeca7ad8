"""The applied floor a reconciler reads of an applier consumer (against a real nats-server): answered at once
while a moment old, read again behind the answer, waited for once too old."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig

from schema import subjects
from schema.keys import ReconcileKey
from services.reconciler.worker.applied import AppliedFloor
from services.runtime.settings import BusSettings, PartitionSettings
from services.runtime.topology import ensure_topology
from tests.fixtures.nats import NatsServer
from tests.helpers import ManualClock, eventually

KEY = ReconcileKey(kind="RayCluster", namespace="default", name="floor")


@pytest.fixture
async def client(nats_server: NatsServer) -> AsyncIterator[Client]:
    nc = await nats.connect(nats_server.url)
    await ensure_topology(nc, bus=BusSettings(partitions=1), partitions=PartitionSettings())
    try:
        yield nc
    finally:
        await nc.close()


async def apply_one(nc: Client) -> int:
    """Publish a batch and acknowledge it as partition 0's applier: the floor it reaches."""
    js = nc.jetstream()
    ack = await js.publish(subjects.command_subject(KEY), b"{}")
    durable = subjects.applier_consumer(0)
    await js.add_consumer(subjects.COMMANDS_STREAM, ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT))
    sub = await js.pull_subscribe_bind(durable=durable, stream=subjects.COMMANDS_STREAM)
    for msg in await sub.fetch(10, timeout=5):
        await msg.ack_sync()
    await sub.unsubscribe()
    return int(ack.seq)


async def test_a_floor_a_moment_old_is_answered_at_once_and_read_again_behind_the_answer(client: Client) -> None:
    clock = ManualClock(100.0)
    floor = AppliedFloor(client.jetstream(), interval=0.5, wait_after=2.0, clock=clock)
    assert await floor.get(0) == 0  # nothing read yet: waited for
    first = await apply_one(client)
    clock.now += 1.0
    assert await floor.get(0) == 0  # a moment old: answered at once
    await eventually(lambda: floor.known(0) == first, timeout=10, message="the read behind the answer")
    assert await floor.get(0) == first

    second = await apply_one(client)
    clock.now += 5.0  # too old to answer with: the caller waits for the read
    assert await floor.get(0) == second
    await floor.close()
