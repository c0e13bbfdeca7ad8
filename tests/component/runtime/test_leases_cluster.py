"""Partition leases on a 3-node JetStream cluster whose leases bucket loses its leader (kill -9).

While the bucket elects a new leader nothing renews; the leases lapse, their entries expire and the member
finds them lost once the bucket answers again. It must hold partitions again within one lease TTL and one
renewal of that moment (a correctness bound: self-fencing makes a member idle meanwhile, so a longer gap
is work nobody does)."""

from __future__ import annotations

import asyncio
import time

import nats

from services.runtime.leases import Membership, PartitionLeases
from services.runtime.settings import BusSettings, NatsSettings, PartitionSettings
from services.runtime.topology import open_buckets, provision
from tests.fixtures.natscluster import NatsCluster
from tests.helpers import eventually

PARTITIONS = 8


async def test_a_member_holds_partitions_again_within_a_ttl_and_a_renewal_of_the_new_leases_leader(
    nats_cluster: NatsCluster,
) -> None:
    settings = PartitionSettings(lease_ttl=4.0, renew_interval=1.0)
    nc = await nats.connect(servers=nats_cluster.servers)
    stop = asyncio.Event()
    try:
        bus = BusSettings(partitions=PARTITIONS, replicas=3)
        # As deploy/'s Job does: a cluster that just formed may still time out creating a stream.
        await provision(NatsSettings(url=nats_cluster.url), bus=bus, partitions=settings, timeout=120)
        buckets = await open_buckets(nc, bus=bus, partitions=settings)
        stops: list[int] = []

        async def on_start(partition: int) -> None:
            await asyncio.sleep(0)

        async def on_stop(partition: int) -> None:
            stops.append(partition)
            await asyncio.sleep(settings.renew_interval / 2)  # a drain that takes a while

        membership = Membership(
            nc,
            buckets.leases,
            "m1",
            PARTITIONS,
            settings,
            connect=lambda: nats.connect(servers=nats_cluster.servers),
        )
        leases = PartitionLeases(membership, "apply", start=on_start, stop=on_stop)
        running = asyncio.create_task(leases.run(stop))
        everything = frozenset(range(PARTITIONS))
        await eventually(lambda: leases.owned == everything, message="every partition claimed")

        victim = await asyncio.to_thread(nats_cluster.leases_leader)
        assert victim is not None
        killed_at = time.monotonic()
        nats_cluster.kill(victim)
        await eventually(
            lambda: asyncio.to_thread(nats_cluster.leases_leader), message="a new leader of the leases bucket"
        )
        outage = time.monotonic() - killed_at  # an upper bound: the new leader was found by polling
        await eventually(
            lambda: leases.owned == everything and all(leases.valid(p) for p in everything),
            message="every partition held and valid again",
        )
        assert leases.longest_gap <= outage + settings.lease_ttl + settings.renew_interval, (
            leases.longest_gap,
            outage,
            stops,
        )
        nats_cluster.restart(victim)
        stop.set()
        await running
    finally:
        stop.set()
        await nc.close()
