"""How far the applier has got: the ack floor of a partition's applier consumer on RAYBUS_COMMANDS, read at
most every ``interval`` seconds per partition and shared by the reconciles of that partition (one JetStream
API call, not one per reconcile). A key's commands and events share a partition number
(``subjects.command_transform_destination``), so the reconciler of events partition p asks the applier
consumer of partition p."""

from __future__ import annotations

import asyncio
import time

from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from schema import subjects
from services.runtime.aio import cancel_and_wait


class AppliedFloor:
    """Cached ack floors of the applier consumers."""

    def __init__(self, js: JetStreamContext, *, interval: float = 0.5) -> None:
        self._js = js
        self._interval = interval
        self._floors: dict[int, tuple[float, int]] = {}
        """Partition → (when read, floor)."""
        self._reading: set[asyncio.Task[int]] = set()
        """Reads under way (held here: a read a caller stopped waiting for still refreshes its floor)."""

    async def get(self, partition: int) -> int:
        """The highest batch sequence below which every batch of ``partition`` has been applied (the one
        known while it is fresh or being read again; else read again, and the read goes on to refresh it
        when the caller stops waiting)."""
        read_at, floor = self._floors.get(partition, (float("-inf"), 0))
        if time.monotonic() - read_at < self._interval:
            return floor
        self._floors[partition] = (time.monotonic(), floor)
        reading = asyncio.create_task(self._read(partition, floor))
        self._reading.add(reading)
        reading.add_done_callback(self._reading.discard)
        return await asyncio.shield(reading)

    async def close(self) -> None:
        """Stop the reads under way."""
        await cancel_and_wait(list(self._reading), timeout=2.0)

    def known(self, partition: int) -> int:
        """The floor of ``partition`` last read (0 before any), without asking the bus."""
        return self._floors.get(partition, (0.0, 0))[1]

    async def _read(self, partition: int, floor: int) -> int:
        try:
            info = await self._js.consumer_info(subjects.COMMANDS_STREAM, subjects.applier_consumer(partition))
        except NatsError:
            return floor  # keep the last known floor: commands just stay in flight longer
        floor = int(info.ack_floor.stream_seq if info.ack_floor else 0)
        self._floors[partition] = (time.monotonic(), floor)
        return floor
