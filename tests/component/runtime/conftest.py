"""Fixtures of the runtime's component tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.js.kv import KeyValue

from services.runtime.settings import BusSettings, PartitionSettings
from services.runtime.topology import ensure_topology
from tests.fixtures.nats import NatsServer


@pytest.fixture
async def objects(nats_server: NatsServer) -> AsyncIterator[tuple[Client, KeyValue]]:
    """A connection to a server with raybus's topology, and its objects bucket."""
    nc = await nats.connect(nats_server.url)
    try:
        buckets = await ensure_topology(nc, bus=BusSettings(partitions=2), partitions=PartitionSettings())
        yield nc, buckets.objects
    finally:
        await nc.close()
