"""How far the applier has got: its consumer's ack floor on RAYBUS_COMMANDS, read at most every
``interval`` seconds and shared by all partitions of a worker (one JetStream API call, not one per
reconcile)."""

from __future__ import annotations

import time

from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from schema import subjects


class AppliedFloor:
    """Cached ack floor of the applier consumer."""

    def __init__(self, js: JetStreamContext, *, interval: float = 0.5) -> None:
        self._js = js
        self._interval = interval
        self._floor = 0
        self._read_at = float("-inf")

    async def get(self) -> int:
        """The highest batch sequence below which every batch has been applied."""
        if time.monotonic() - self._read_at >= self._interval:
            self._read_at = time.monotonic()
            try:
                info = await self._js.consumer_info(subjects.COMMANDS_STREAM, subjects.APPLIER_CONSUMER)
            except NatsError:
                return self._floor  # keep the last known floor: commands just stay in flight longer
            self._floor = int(info.ack_floor.stream_seq if info.ack_floor else 0)
        return self._floor
