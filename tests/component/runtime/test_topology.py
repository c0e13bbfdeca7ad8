"""Topology creation and snapshot reads against a real nats-server."""

from __future__ import annotations

import asyncio
import logging

import msgspec
import nats
import pytest

from schema import subjects
from schema.keys import KeyKind, ReconcileKey
from services.runtime.errors import TopologyError
from services.runtime.settings import BusSettings, PartitionSettings
from services.runtime.snapshots import SnapshotReader
from services.runtime.topology import ensure_topology, parse_version, require_server_version, when_answered
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually

KEY = ReconcileKey(kind="RayCluster", namespace="default", name="demo.cluster")


async def test_topology_is_idempotent_and_partitions_events(nats_server: NatsServer) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        bus = BusSettings(partitions=4)
        await ensure_topology(nc, bus=bus, partitions=PartitionSettings())
        await ensure_topology(nc, bus=bus, partitions=PartitionSettings())
        js = nc.jetstream()
        await js.publish(subjects.events_subject(KEY), b"{}")
        info = await js.stream_info(subjects.EVENTS_STREAM, subjects_filter=">")
        stored = list((info.state.subjects or {}).keys())
        assert len(stored) == 1
        assert stored[0].startswith("raybus.part.")
        assert subjects.key_from_stored_subject(stored[0]) == KEY
    finally:
        await nc.close()


async def test_a_start_waits_for_a_nats_server_that_restarts_instead_of_ending(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A service that starts while nats-server is killed and restarted creates its topology once it is back."""
    nc = await nats.connect(nats_server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    try:
        nats_server.kill()
        bus = BusSettings(partitions=2)
        with caplog.at_level(logging.WARNING, logger="services.runtime.topology"):
            starting = asyncio.ensure_future(
                when_answered(lambda: ensure_topology(nc, bus=bus, partitions=PartitionSettings()), "test")
            )
            await eventually(
                lambda: any("did not answer at start-up" in r.getMessage() for r in caplog.records),
                timeout=60,
                message="a try failed while the server was down",
            )
            assert not starting.done()
            nats_server.start()
            buckets = await asyncio.wait_for(starting, 120)
        await buckets.objects.put("probe", b"1")
        assert (await buckets.objects.get("probe")).value == b"1"
    finally:
        await nc.close()


async def test_a_keys_commands_and_events_share_the_partition_partition_of_computes(
    nats_server: NatsServer,
) -> None:
    """The applier of partition p and the reconciler of partition p see the same keys, and the prober
    computes the partition the server's transform chose."""
    nc = await nats.connect(nats_server.url)
    try:
        partitions = 7
        await ensure_topology(nc, bus=BusSettings(partitions=partitions), partitions=PartitionSettings())
        js = nc.jetstream()
        kinds: tuple[tuple[KeyKind, str], ...] = (("RayCluster", "default"), ("RayJob", "team-a"))
        keys = [ReconcileKey(kind=kind, namespace=ns, name=f"c{n}.x") for n in range(40) for kind, ns in kinds]
        for key in keys:
            await js.publish(subjects.events_subject(key), b"{}")
            await js.publish(subjects.command_subject(key), b"{}")
        for key in keys:
            expected = subjects.partition_of(key, partitions)
            event = await js.get_last_msg(subjects.EVENTS_STREAM, subjects.stored_events_filter(key))
            command = await js.get_last_msg(subjects.COMMANDS_STREAM, subjects.stored_commands_filter(key))
            assert event.subject is not None and command.subject is not None
            assert subjects.partition_of_stored(event.subject) == expected
            assert subjects.partition_of_stored(command.subject) == expected
            assert subjects.key_from_stored_subject(command.subject) == key
        assert len({subjects.partition_of(key, partitions) for key in keys}) == partitions
    finally:
        await nc.close()


async def test_snapshot_reads_entries_of_one_key_only(nats_server: NatsServer) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        buckets = await ensure_topology(nc, bus=BusSettings(partitions=2), partitions=PartitionSettings())
        other = ReconcileKey(kind="RayCluster", namespace="default", name="other")
        await buckets.objects.put(subjects.entry_key(KEY, "RayCluster", KEY.name), msgspec.json.encode({"a": 1}))
        await buckets.objects.put(subjects.entry_key(KEY, "Pod", "p.1"), msgspec.json.encode({"p": 1}))
        await buckets.objects.put(subjects.entry_key(KEY, "Pod", "p2"), msgspec.json.encode({"p": 2}))
        rev = await buckets.objects.delete(subjects.entry_key(KEY, "Pod", "p2"))
        await buckets.objects.put(subjects.entry_key(other, "Pod", "x"), b"{}")
        snap = await SnapshotReader(nc).read(KEY, min_revision=rev)
        assert snap.owner() == {"a": 1}
        assert snap.entries["Pod"] == {"p.1": {"p": 1}}
        assert snap.revision >= rev
        empty = await SnapshotReader(nc).read(ReconcileKey(kind="RayJob", namespace="x", name="y"))
        assert empty.entries == {}
    finally:
        await nc.close()


async def test_a_snapshot_larger_than_one_multi_last_answer_is_read_whole(nats_server: NatsServer) -> None:
    """The server answers a multi_last with at most 1,024 keys: a 2,000-worker cluster's snapshot has more."""
    nc = await nats.connect(nats_server.url)
    try:
        buckets = await ensure_topology(nc, bus=BusSettings(partitions=2), partitions=PartitionSettings())
        await buckets.objects.put(subjects.entry_key(KEY, "RayCluster", KEY.name), b"{}")
        for i in range(2100):
            await buckets.objects.put(subjects.entry_key(KEY, "Pod", f"w-{i}"), msgspec.json.encode({"i": i}))
        await buckets.objects.put(subjects.entry_key(KEY, "Pod", "w-7"), msgspec.json.encode({"i": "again"}))
        rev = await buckets.objects.delete(subjects.entry_key(KEY, "Pod", "w-8"))
        await buckets.objects.put(
            subjects.entry_key(ReconcileKey(kind="RayJob", namespace="d", name="o"), "Pod", "x"), b"{}"
        )
        snap = await SnapshotReader(nc).read(KEY, min_revision=rev)
        assert len(snap.entries["Pod"]) == 2099 and "w-8" not in snap.entries["Pod"]
        assert snap.entries["Pod"]["w-7"] == {"i": "again"} and snap.entries["Pod"]["w-2099"] == {"i": 2099}
        assert snap.owner() == {} and snap.revision >= rev
    finally:
        await nc.close()


@pytest.mark.parametrize(
    ("text", "expected"), [("2.15.1", (2, 15, 1)), ("2.9", (2, 9, 0)), ("2.12.0-beta.1", (2, 12, 0))]
)
def test_parse_version(text: str, expected: tuple[int, int, int]) -> None:
    assert parse_version(text) == expected


def test_old_server_is_refused() -> None:
    with pytest.raises(TopologyError, match=r"2\.9\.25 is too old"):
        require_server_version("2.9.25")
    require_server_version("2.15.1")
