"""Partition leases against a real nats-server: renewal, a lease that expired unclaimed, a lease lost."""

from __future__ import annotations

import nats

from schema import subjects
from services.runtime.leases import Membership, PartitionLeases
from services.runtime.settings import BusSettings, PartitionSettings
from services.runtime.topology import ensure_topology
from tests.fixtures.nats import NatsServer


async def test_a_lease_that_expired_unclaimed_is_taken_again_and_one_taken_by_another_is_stopped(
    nats_server: NatsServer,
) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        buckets = await ensure_topology(nc, bus=BusSettings(partitions=2), partitions=PartitionSettings())
        started: list[int] = []
        stopped: list[int] = []

        async def start(partition: int) -> None:
            started.append(partition)

        async def stop(partition: int) -> None:
            stopped.append(partition)

        membership = Membership(nc, buckets.leases, "m1", 2, PartitionSettings())
        leases = PartitionLeases(membership, "apply", start=start, stop=stop)
        await leases.tick()
        assert leases.owned == frozenset({0, 1}) and started == [0, 1]

        first = subjects.lease_key("apply", 0)
        await buckets.leases.purge(first)  # what the bucket's TTL does to a lease not renewed in time
        await leases.tick()
        assert leases.owned == frozenset({0, 1}) and leases.valid(0)
        assert stopped == [] and started == [0, 1]  # taken again without draining and restarting it

        await buckets.leases.purge(first)
        await buckets.leases.create(first, b"m2")  # another member claimed it meanwhile
        await leases.tick()
        assert stopped == [0] and leases.owned == frozenset({1}) and not leases.valid(0)
        await leases.release_all()
    finally:
        await nc.close()
