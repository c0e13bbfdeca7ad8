"""Partition leases against a real nats-server: renewal, and a lease that expired."""

from __future__ import annotations

import nats

from schema import subjects
from services.runtime.leases import Membership, PartitionLeases
from services.runtime.settings import BusSettings, PartitionSettings
from services.runtime.topology import ensure_topology
from tests.fixtures.nats import NatsServer


async def test_renewals_keep_the_partitions_and_an_expired_lease_stops_its_partition(
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
        await leases.tick()
        assert leases.owned == frozenset({0, 1}) and started == [0, 1] and stopped == []

        # What the bucket's TTL does to a lease not renewed in time: the partition is stopped, and claimed
        # again by the next round (a fresh start rebuilds what another holder may have published meanwhile).
        await buckets.leases.purge(subjects.lease_key("apply", 0))
        await leases.tick()
        assert stopped == [0] and leases.owned == frozenset({0, 1}) and started == [0, 1, 0]
        await leases.release_all()
    finally:
        await nc.close()
