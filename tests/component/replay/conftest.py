"""A real nats-server with raybus's topology, and a way to put a recorded history on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final

import msgspec
import nats
import pytest
from nats.aio.client import Client

from schema import codec, subjects
from schema.messages import WatchEvent
from services.replay.history import KeyHistory, entry_of
from services.runtime.settings import BusSettings, PartitionSettings
from services.runtime.topology import ensure_topology
from tests.fixtures.nats import NatsServer


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Client]:
    """A connection to a fresh server with raybus's streams and buckets (no consumers: nothing runs)."""
    nc = await nats.connect(nats_server.url)
    try:
        await ensure_topology(nc, bus=BusSettings(partitions=4), partitions=PartitionSettings(), with_consumers=False)
        yield nc
    finally:
        await nc.close()


FILLER: Final = subjects.kv_subject(subjects.OBJECTS_BUCKET, "RayCluster.filler.filler.Filler.x")
"""KV writes of another key that move the KV revision forward, as other keys' writes did when recording."""


async def publish_history(nc: Client, history: KeyHistory) -> None:
    """Write a recorded history to this bus as the watcher and reconciler did.

    KV writes land at their recorded revisions (``decide`` salts every command id with the
    snapshot revision, so a replay must see the same revisions): filler writes of another key stand in
    for the rest of the recording's KV. Then the inputs go to the key's events subject, and the decisions
    to its commands subject with their input sequences mapped to the new ones. Publish histories in the
    order they were recorded (revisions only move forward).
    """
    js = nc.jetstream()
    key = history.key
    writes = [r for r in history.inputs if entry_of(r.message) is not None]
    for recorded in sorted(writes, key=lambda r: (getattr(r.message, "kv_revision", 0), r.seq)):
        wanted = getattr(recorded.message, "kv_revision", 0)
        last = (await js.stream_info(subjects.kv_stream(subjects.OBJECTS_BUCKET))).state.last_seq
        assert last < wanted, f"KV already at revision {last}, cannot write revision {wanted}"
        for _ in range(wanted - last - 1):
            await js.publish(FILLER, b"{}")
        kind, name = entry_of(recorded.message) or ("", "")
        subject = subjects.kv_subject(subjects.OBJECTS_BUCKET, subjects.entry_key(key, kind, name))
        message = recorded.message
        if isinstance(message, WatchEvent) and message.event_type == "DELETED":
            ack = await js.publish(subject, b"", headers={"KV-Operation": "DEL"})
        else:
            value = message.object if isinstance(message, WatchEvent) else getattr(message, "data", {})
            ack = await js.publish(subject, msgspec.json.encode(value))
        assert ack.seq == wanted
    sequences: dict[int, int] = {}
    for recorded in history.inputs:  # at their recorded KV revisions already
        ack = await js.publish(subjects.events_subject(key), codec.encode(recorded.message))
        sequences[recorded.seq] = ack.seq
    for recorded_decision in history.decisions:
        batch = recorded_decision.batch
        batch = msgspec.structs.replace(batch, inputs=tuple(sequences[s] for s in batch.inputs))
        await js.publish(subjects.command_subject(key), codec.encode(batch))
