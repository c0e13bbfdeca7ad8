"""How far the applier has got: the ack floor of a partition's applier consumer on RAYBUS_COMMANDS, read at
most every ``interval`` seconds per partition and shared by the reconciles of that partition (one JetStream
API call, not one per reconcile). A key's commands and events share a partition number
(``subjects.command_transform_destination``), so the reconciler of events partition p asks the applier
consumer of partition p.

A floor read less than :data:`WAIT_AFTER` seconds ago is answered at once while it is read again in the
background: the read is a round trip on the path of a change, and a floor older by a moment can only be
lower, which keeps commands in flight a moment longer, never shorter. (The outcomes the applier reports
land them sooner anyway.)"""

from __future__ import annotations

import asyncio
import time
from typing import Final

from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from schema import subjects
from services.runtime.aio import cancel_and_wait
from services.runtime.clock import Monotonic

WAIT_AFTER: Final = 2.0
"""Seconds after its read from which a caller waits for the floor's next read rather than take it."""


class AppliedFloor:
    """Cached ack floors of the applier consumers."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        interval: float = 0.5,
        wait_after: float = WAIT_AFTER,
        clock: Monotonic = time.monotonic,
    ) -> None:
        self._js = js
        self._interval = interval
        self._wait_after = wait_after
        self._clock = clock
        self._floors: dict[int, tuple[float, int]] = {}
        """Partition → (when read, floor)."""
        self._reading: dict[int, asyncio.Task[int]] = {}
        """Partition → its read under way (held here: a read nobody waits for still refreshes its floor)."""

    async def get(self, partition: int) -> int:
        """The highest batch sequence below which every batch of ``partition`` has been applied: the one
        known while it is fresh, or while it is read again and was read less than ``wait_after`` ago; else
        the next read's."""
        read_at, floor = self._floors.get(partition, (float("-inf"), 0))
        age = self._clock() - read_at
        if age < self._interval:
            return floor
        reading = self._reading.get(partition)
        if reading is None:
            reading = self._reading[partition] = asyncio.create_task(self._read(partition, floor))
            reading.add_done_callback(lambda _: self._reading.pop(partition, None))
        if age < self._wait_after:
            return floor
        return await asyncio.shield(reading)

    async def close(self) -> None:
        """Stop the reads under way."""
        await cancel_and_wait(list(self._reading.values()), timeout=2.0)

    def known(self, partition: int) -> int:
        """The floor of ``partition`` last read (0 before any), without asking the bus."""
        return self._floors.get(partition, (0.0, 0))[1]

    async def _read(self, partition: int, floor: int) -> int:
        try:
            info = await self._js.consumer_info(subjects.COMMANDS_STREAM, subjects.applier_consumer(partition))
        except NatsError:
            # Keep the last known floor (commands just stay in flight longer) until the next try is due.
            self._floors[partition] = (self._clock(), floor)
            return floor
        floor = int(info.ack_floor.stream_seq if info.ack_floor else 0)
        self._floors[partition] = (self._clock(), floor)
        return floor
