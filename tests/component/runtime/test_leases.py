"""Partition leases against a real nats-server: renewal, a lease that expired, renewal on a busy loop."""

from __future__ import annotations

import asyncio
import threading
import time

import nats
import pytest
from nats.js.errors import KeyNotFoundError

from schema import subjects
from services.runtime.aio import cancel_and_wait
from services.runtime.leases import Membership, PartitionLeases
from services.runtime.settings import BusSettings, PartitionSettings
from services.runtime.topology import ensure_topology
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually


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


async def test_a_busy_event_loop_keeps_its_leases(nats_server: NatsServer) -> None:
    """The renewal thread renews while the caller's loop runs work without yielding for longer than the
    lease lives (a reconcile of a huge cluster, or a process throttled by its CPU quota)."""
    nc = await nats.connect(nats_server.url)
    stop = asyncio.Event()
    try:
        settings = PartitionSettings(lease_ttl=2.0, renew_interval=0.5)
        buckets = await ensure_topology(nc, bus=BusSettings(partitions=2), partitions=settings)
        stopped: list[int] = []

        async def start(partition: int) -> None:
            pass

        async def on_stop(partition: int) -> None:
            stopped.append(partition)

        membership = Membership(nc, buckets.leases, "m1", 2, settings, connect=lambda: nats.connect(nats_server.url))
        leases = PartitionLeases(membership, "reconcile", start=start, stop=on_stop)
        running = asyncio.create_task(leases.run(stop))
        await eventually(lambda: leases.owned == frozenset({0, 1}), message="both partitions claimed")
        key = subjects.lease_key("reconcile", 0)
        before = (await buckets.leases.get(key)).revision

        busy_until = time.monotonic() + 3 * settings.lease_ttl
        while time.monotonic() < busy_until:  # holds the loop, and the GIL but for its switch interval
            pass
        assert leases.valid(0) and leases.valid(1)

        after = (await buckets.leases.get(key)).revision
        assert after is not None and before is not None and after > before
        await eventually(lambda: leases.owned == frozenset({0, 1}), message="still both partitions")
        assert stopped == []
        stop.set()
        await running
        assert stopped == [0, 1] and leases.owned == frozenset()
        with pytest.raises(KeyNotFoundError):
            await buckets.leases.get(key)
    finally:
        stop.set()
        await nc.close()


async def test_the_renewal_thread_ends_with_its_owner_even_when_cancelled_again_and_again(
    nats_server: NatsServer,
) -> None:
    """A thread that outlived its owner would keep its leases: no other member could take the partitions."""
    nc = await nats.connect(nats_server.url)
    try:
        settings = PartitionSettings(lease_ttl=2.0, renew_interval=0.5)
        buckets = await ensure_topology(nc, bus=BusSettings(partitions=2), partitions=settings)

        async def nothing(partition: int) -> None:
            await asyncio.sleep(0)

        membership = Membership(nc, buckets.leases, "m1", 2, settings, connect=lambda: nats.connect(nats_server.url))
        leases = PartitionLeases(membership, "apply", start=nothing, stop=nothing)
        running = asyncio.create_task(leases.run(asyncio.Event()))
        await eventually(lambda: leases.owned == frozenset({0, 1}), message="both partitions claimed")
        assert renewal_threads() == ["apply-leases"]
        await cancel_and_wait([running], timeout=10.0)  # cancels again every 0.2 s while it lingers
        await eventually(lambda: not renewal_threads(), message="the renewal thread ended")
    finally:
        await nc.close()


def renewal_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.endswith("-leases")]


async def test_lost_leases_are_stopped_at_once_and_claimed_again_without_waiting_for_a_slow_stop(
    nats_server: NatsServer,
) -> None:
    """Every lost partition stops concurrently (each stop waits until all of them are stopping, which
    one-after-another stops never reach); those whose stop is over are claimed again while one still drains."""
    partitions, slow = 16, 5
    nc = await nats.connect(nats_server.url)
    stop = asyncio.Event()
    try:
        settings = PartitionSettings(lease_ttl=5.0, renew_interval=0.2)
        buckets = await ensure_topology(nc, bus=BusSettings(partitions=partitions), partitions=settings)
        starts: dict[int, int] = dict.fromkeys(range(partitions), 0)
        stopping: set[int] = set()
        all_stopping = asyncio.Event()
        slow_may_end = asyncio.Event()

        async def on_start(partition: int) -> None:
            starts[partition] += 1

        async def on_stop(partition: int) -> None:
            stopping.add(partition)
            if len(stopping) == partitions:
                all_stopping.set()
            await all_stopping.wait()
            if partition == slow:
                await slow_may_end.wait()
            stopping.discard(partition)

        membership = Membership(nc, buckets.leases, "m1", partitions, settings)
        leases = PartitionLeases(membership, "reconcile", start=on_start, stop=on_stop)
        running = asyncio.create_task(leases.run(stop))
        await eventually(lambda: leases.owned == frozenset(range(partitions)), message="every partition claimed")

        for partition in range(partitions):  # what the TTL does to leases nobody could renew
            await buckets.leases.purge(subjects.lease_key("reconcile", partition))
        await eventually(all_stopping.is_set, message="every lost partition stopping at the same time")
        others = [p for p in range(partitions) if p != slow]
        await eventually(
            lambda: all(starts[p] == 2 and leases.valid(p) for p in others),
            message="the partitions whose stop ended claimed again",
        )
        assert stopping == {slow} and starts[slow] == 1 and not leases.valid(slow)

        slow_may_end.set()
        await eventually(lambda: starts[slow] == 2 and leases.valid(slow), message="the slow one claimed again")
        stop.set()
        await running
        assert leases.owned == frozenset()
    finally:
        stop.set()
        await nc.close()


async def test_a_renewal_written_after_its_answer_was_given_up_keeps_the_lease(nats_server: NatsServer) -> None:
    """During a leader election a renewal can be stored after the member stopped waiting for the answer:
    the entry still names the member, so the lease is still its own, not lost (a partition stopped and
    restarted for nothing). An entry naming another member is lost."""
    nc = await nats.connect(nats_server.url)
    try:
        buckets = await ensure_topology(nc, bus=BusSettings(partitions=2), partitions=PartitionSettings())
        stopped: list[int] = []

        async def start(partition: int) -> None:
            pass

        async def stop(partition: int) -> None:
            stopped.append(partition)

        membership = Membership(nc, buckets.leases, "m1", 2, PartitionSettings())
        leases = PartitionLeases(membership, "apply", start=start, stop=stop)
        await leases.tick()
        assert leases.owned == frozenset({0, 1})

        await buckets.leases.put(subjects.lease_key("apply", 0), b"m1")  # the renewal that landed unseen
        await buckets.leases.put(subjects.lease_key("apply", 1), b"m2")  # taken (what a bug elsewhere would do)
        await leases.tick()
        assert stopped == [1] and leases.valid(0)
        await leases.release_all()
    finally:
        await nc.close()


async def test_the_bucket_ttl_follows_the_setting_and_a_member_fences_by_the_shorter(nats_server: NatsServer) -> None:
    """``raybus topology`` gives an existing bucket the configured TTL; a member whose setting is longer
    than its bucket's (services rolled before the topology ran) fences by the bucket's, never past the
    moment its entries expire."""
    nc = await nats.connect(nats_server.url)
    stop = asyncio.Event()
    try:
        bus = BusSettings(partitions=2)
        await ensure_topology(nc, bus=bus, partitions=PartitionSettings(lease_ttl=10.0))
        buckets = await ensure_topology(nc, bus=bus, partitions=PartitionSettings(lease_ttl=4.0))
        assert (await buckets.leases.status()).ttl == 4.0

        async def nothing(partition: int) -> None:
            await asyncio.sleep(0)

        longer = PartitionSettings(lease_ttl=20.0, renew_interval=0.5)
        leases = PartitionLeases(Membership(nc, buckets.leases, "m1", 2, longer), "apply", start=nothing, stop=nothing)
        running = asyncio.create_task(leases.run(stop))
        await eventually(lambda: leases.owned == frozenset({0, 1}), message="both partitions claimed")
        assert leases.ttl == 4.0
        stop.set()
        await running
    finally:
        stop.set()
        await nc.close()
