"""Bus timers: a Decision's ``wake_at`` becomes a JetStream message schedule (docs/architecture.md#timers).

The schedule subject ``raybus.timers.<key>`` holds one pending schedule per key (a newer one replaces
the older, checked with nats-server 2.15); at the due time JetStream publishes the ``TimerTick`` on the
key's events subject, so it arrives on the key's own partition like any other input. A due time in the
past fires at once. Schedules have one-second resolution, so due times are rounded up: a tick never
arrives before its time. To avoid one publish per reconcile, a worker remembers the earliest pending
due time it scheduled per key and republishes only when the new one is earlier or the old one has
passed; a tick that arrives "too early" for a later wish is a harmless no-op reconcile. When a key's
latest decision wants no wake-up at all, its pending tick is replaced by its resync (or withdrawn when
resync is off or the key's resource is gone), so a retry wish that was overtaken by events does not wake it.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Final

from nats.js import JetStreamContext

from schema import subjects
from schema.codec import encode
from schema.keys import ReconcileKey
from schema.messages import BACKSTOP, RESYNC, TimerTick, is_backstop, is_resync
from schema.times import format_time
from services.runtime.bus import publish
from services.runtime.clock import Clock, utc_now

FIRING_SLACK: Final = timedelta(seconds=2)
"""How long after its due time a tick may still be on its way (due times round up to the second)."""
BACKSTOP_TOLERANCE: Final = timedelta(seconds=10)
"""A backstop tick pending this close to the wanted time is left as it is (one publish, not one per
decision)."""


SCHEDULER_HEADER: Final = "Nats-Scheduler"
"""Set by nats-server (2.12+) on a message a schedule published: the schedule's subject. A client
cannot set it on a schedule (the server refuses the publish), so it says which key's timer sent it."""


def schedule_header(due: datetime) -> str:
    """``@at <RFC3339>`` rounded up to the next whole second."""
    ts = math.ceil(due.timestamp())
    return "@at " + format_time(datetime.fromtimestamp(ts, UTC))


class TimerScheduler:
    """Publishes at most one schedule per key and wish."""

    def __init__(self, js: JetStreamContext, *, clock: Clock = utc_now) -> None:
        self._js = js
        self._clock = clock
        self._pending: dict[ReconcileKey, TimerTick] = {}
        """Key → the tick this worker last scheduled for it."""

    async def schedule(
        self, key: ReconcileKey, due: datetime, reason: str = "", *, over_backstop: bool = False
    ) -> bool:
        """Ask for a tick of ``key`` at ``due``; returns whether a schedule was published. With
        ``over_backstop`` (the memory a pending backstop stood behind holds nothing any more), a pending
        backstop is replaced even when it is earlier: its tick would only be a reconcile that decides
        nothing new."""
        pending = self._pending.get(key)
        known = None if pending is None or (over_backstop and is_backstop(pending)) else pending.due_at
        if known is not None and known <= due and known > self._clock() - FIRING_SLACK:
            # An earlier tick is pending (or just due and not delivered yet): a later schedule would
            # replace it, and that tick's reconcile decides the later wake-up again anyway.
            return False
        await self._publish(key, due, reason)
        return True

    async def _publish(self, key: ReconcileKey, due: datetime, reason: str) -> None:
        tick = TimerTick(key=key, due_at=due, reason=reason)
        await publish(
            self._js,
            subjects.timer_subject(key),
            encode(tick),
            headers={
                "Nats-Schedule": schedule_header(due),
                "Nats-Schedule-Target": subjects.events_subject(key),
            },
        )
        self._pending[key] = tick

    async def resync(self, key: ReconcileKey, due: datetime) -> bool:
        """Make the key's pending tick its resync at ``due`` (docs/architecture.md#liveness): the latest
        decision wants no earlier wake-up, so a pending one of another kind is replaced (as :meth:`cancel`
        would withdraw it), while an earlier resync still pending is kept; returns whether a schedule was
        published (at most one per key and resync, however many decisions come in between)."""
        pending = self._pending.get(key)
        if pending is not None and is_resync(pending) and self._clock() - FIRING_SLACK < pending.due_at <= due:
            return False
        await self._publish(key, due, RESYNC)
        return True

    async def backstop(self, key: ReconcileKey, due: datetime) -> bool:
        """Make the key's pending tick come at ``due``, earlier or later than a pending one, so that a
        wake-up held in a worker's memory still comes if the worker goes; returns whether a schedule was
        published (not when one is pending within ``BACKSTOP_TOLERANCE`` of ``due``)."""
        pending = self._pending.get(key)
        if pending is not None and abs(pending.due_at - due) <= BACKSTOP_TOLERANCE:
            return False
        await self._publish(key, due, BACKSTOP)
        return True

    async def cancel(self, key: ReconcileKey) -> bool:
        """Withdraw the tick this worker scheduled for ``key`` if it is still pending (the key's latest
        decision asks for no wake-up); returns whether there was one.

        A newer message on a schedule subject supersedes the schedule, so an empty message rolled up
        onto the subject leaves nothing to fire (checked with nats-server 2.15); it stays, one per key,
        on a subject no consumer reads. A tick this worker does not know of (scheduled before a restart
        or by a former owner of the partition) still fires: a no-op reconcile.
        """
        pending = self._pending.pop(key, None)
        if pending is None or pending.due_at <= self._clock():
            return False
        await publish(self._js, subjects.timer_subject(key), b"", headers={"Nats-Rollup": "sub"})
        return True

    def forget(self, key: ReconcileKey) -> None:
        """Drop the memory of a key's timer (it fired, or the key left this worker)."""
        self._pending.pop(key, None)
