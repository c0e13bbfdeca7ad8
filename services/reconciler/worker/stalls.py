"""Keys whose inputs changed but that were not decided within a bound: shown, never stuck silently.

Every input of a key (a watch event, an observation, a tick) waits in its partition of RAYBUS_EVENTS
until a decision is stored and the input is acknowledged. Nothing else can keep a key from being decided
but a partition that does not move: its reconciler is stuck in a reconcile, fenced out again and again,
or no reconciler claims it. The reconciler holding the partition is the one that cannot tell, so every
reconciler replica looks at every partition, every ``stall_after / 4`` seconds (at most every 30 s):

1. The partition consumer's ack floor says up to where every input is decided; inputs after it may be.
2. The inputs after the floor stored more than ``stall_after`` ago (at most :data:`LOOK_AHEAD` of them)
   are candidates, except ticks that are decided without a record (resync and backstop ticks, whose
   keys have no new input) and messages that do not decode (they are dead-lettered with their reason).
3. A candidate is decided when a command batch of its key stored since names it or a later input (a
   decision records its inputs), or reports its failure (its Warning Event is shown already).

Each key left is undecided: it counts in ``raybus_keys_undecided`` (this process's last look) and
``raybus_reconcile_stalls_total``. When its partition's ack floor has not moved for ``stall_after`` either
(the partition is stuck, not only behind a burst), it also gets one Warning Event ``ReconcileStalled`` per
stalled input, published like a failure report (``reports.py``): the applier writes it, and its id is the
input's sequence, so the replicas that all see it publish it once (JetStream de-duplication, then
AlreadyExists). A partition that moves gets no Event: its keys come in their turn, and an Event per waiting
key would add API writes to a stack that is already overloaded.

Not seen here: a KV write whose event was lost (the projection died between the two). The key's resync
decides it within its period (``resync.py``); the watch side's relist repairs the projection itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from opentelemetry.metrics import CallbackOptions, Observation

from schema import subjects
from schema.codec import decode_batch, decode_input, encode
from schema.keys import ReconcileKey
from schema.messages import CommandBatch, EmitEvent, WatchEvent, is_backstop, unrecorded_when_unchanged
from services.reconciler.worker.reports import failure_report, owner_uid
from services.runtime.bus import publish
from services.runtime.directget import direct_batches
from services.runtime.errors import RetryableError
from services.runtime.metrics import Tally, meter
from services.runtime.publishing import AckedJetStream

log = logging.getLogger(__name__)
_meter = meter(__name__)
_stalls = Tally(
    _meter,
    "raybus_reconcile_stalls_total",
    description="inputs found undecided past --stall-after (each once per look)",
)

STALLED_REASON: Final = "ReconcileStalled"
"""Reason of the Warning Event on a custom resource whose change was not decided within the bound."""
LOOK_AHEAD: Final = 64
"""Inputs after a partition's ack floor looked at per look: enough to name the stalled keys, bounded."""
DECISIONS_AHEAD: Final = 16
"""Command batches of a key read per request while looking for the decision that names an input."""
MAX_INTERVAL: Final = 30.0
"""Seconds between looks at most."""


@dataclass(frozen=True)
class Stall:
    """An input of ``key`` (stream sequence ``seq`` in ``partition``) undecided since ``stored_at``."""

    key: ReconcileKey
    partition: int
    seq: int
    stored_at: datetime
    uid: str = ""
    stuck: bool = False
    """Its partition's ack floor has not moved for ``stall_after`` or longer: no reconciler is deciding
    the partition (a partition that moves is only behind, and its inputs come in their turn)."""


_undecided: dict[int, int] = {}
"""Partition → keys found undecided at this process's last look."""


def _observe(_: CallbackOptions) -> Iterable[Observation]:
    yield Observation(sum(_undecided.values()))


_meter.create_observable_gauge(
    "raybus_keys_undecided",
    callbacks=[_observe],
    description="keys with an input undecided past --stall-after, at this process's last look",
)


def look_interval(stall_after: float) -> float:
    """Seconds between two looks for ``stall_after``."""
    return min(MAX_INTERVAL, max(stall_after / 4, 0.5))


def _stall_report(batch: CommandBatch) -> bool:
    """A report of a stall (this module's), which shows the key undecided, not decided."""
    return any(isinstance(c, EmitEvent) and c.reason == STALLED_REASON for c in batch.commands)


class StallWatch:
    """Looks at every partition for inputs undecided past ``stall_after`` and shows them."""

    def __init__(self, nc: Client, *, partitions: int, stall_after: float) -> None:
        self._nc = nc
        self._js: JetStreamContext = AckedJetStream(nc)
        self._partitions = partitions
        self._stall_after = stall_after
        self._floors: dict[int, tuple[int, datetime]] = {}
        """Partition → its ack floor at the last look, and since when this watch has seen it there."""

    async def run(self, stop: asyncio.Event) -> None:
        """Look every :func:`look_interval` until ``stop`` is set (a look that fails is logged and retried)."""
        interval = look_interval(self._stall_after)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            if stop.is_set():
                return
            try:
                await self.report(await self.look())
            except (NatsError, RetryableError, TimeoutError) as exc:
                log.warning("could not look for undecided keys (%s); trying again in %.0fs", exc, interval)
            except Exception:  # the watch itself must not end silently: the next look tries again
                log.exception("looking for undecided keys failed; trying again in %.0fs", interval)

    async def look(self, now: datetime | None = None) -> list[Stall]:
        """The inputs undecided for longer than ``stall_after`` (one per key: its oldest)."""
        now = now or datetime.now(UTC)
        found: list[Stall] = []
        for partition in range(self._partitions):
            stalls = await self._look_at(partition, now)
            _undecided[partition] = len(stalls)
            found.extend(stalls)
        return found

    async def _look_at(self, partition: int, now: datetime) -> list[Stall]:
        info = await self._js.consumer_info(subjects.EVENTS_STREAM, subjects.partition_consumer(partition))
        if not info.num_ack_pending and not info.num_pending:
            self._floors.pop(partition, None)
            return []
        floor = info.ack_floor.stream_seq if info.ack_floor is not None and info.ack_floor.stream_seq else 0
        known = self._floors.get(partition)
        if known is None or known[0] != floor:
            known = self._floors[partition] = (floor, now)
        stuck = (now - known[1]).total_seconds() >= self._stall_after
        cutoff = now - timedelta(seconds=self._stall_after)
        candidates: dict[ReconcileKey, Stall] = {}
        seen = 0
        batches = direct_batches(
            self._nc,
            subjects.EVENTS_STREAM,
            subject_filter=subjects.partition_filter(partition),
            start_seq=floor + 1,
            batch=LOOK_AHEAD,
        )
        async with contextlib.aclosing(batches):
            async for stored in batches:
                seen += 1
                if stored.time > cutoff or seen > LOOK_AHEAD:
                    break
                try:
                    key = subjects.key_from_stored_subject(stored.subject)
                    message = decode_input(stored.data)
                except Exception:  # parked by the partition's consumer with its reason, not a stall
                    continue
                if key in candidates or unrecorded_when_unchanged(message) or is_backstop(message):
                    continue
                uid = owner_uid(key, [message]) if isinstance(message, WatchEvent) else ""
                candidates[key] = Stall(
                    key=key, partition=partition, seq=stored.seq, stored_at=stored.time, uid=uid, stuck=stuck
                )
        return [stall for stall in candidates.values() if not await self._decided(stall)]

    async def _decided(self, stall: Stall) -> bool:
        """Whether a batch of the key stored since the input names it or a later input, or reports it."""
        batches = direct_batches(
            self._nc,
            subjects.COMMANDS_STREAM,
            subject_filter=subjects.stored_commands_filter(stall.key),
            start_time=stall.stored_at,
            batch=DECISIONS_AHEAD,
        )
        async with contextlib.aclosing(batches):
            async for stored in batches:
                try:
                    batch = decode_batch(stored.data)
                except Exception:
                    continue
                if max(batch.inputs, default=0) >= stall.seq or (batch.report and not _stall_report(batch)):
                    return True
        return False

    async def report(self, stalls: list[Stall], now: datetime | None = None) -> None:
        """Count each undecided input; log each of a stuck partition and publish its Warning Event (best
        effort: NATS may be what stalls). One of a partition that moves is only behind: an Event per waiting
        key would add API writes to an overloaded stack, and its decision comes in its turn."""
        now = now or datetime.now(UTC)
        for stall in stalls:
            key = stall.key
            waited = (now - stall.stored_at).total_seconds()
            _stalls.add(1, {"raybus.kind": key.kind, "partition": str(stall.partition), "stuck": str(stall.stuck)})
            if not stall.stuck:
                continue
            message = (
                f"a change of {key.kind} {key.namespace}/{key.name} has waited {waited:.0f}s for a decision "
                f"(input {stall.seq} of partition {stall.partition}, which no reconciler has moved on for "
                f"{self._stall_after:.0f}s or longer)"
            )
            log.warning("%s", message, extra={"raybus.key": str(key)})
            batch = failure_report(
                key,
                uid=stall.uid,
                sequences=[stall.seq],
                reason=f"input {stall.seq} undecided for {waited:.0f}s",
                now=now,
                event_reason=STALLED_REASON,
                message=message,
            )
            try:
                await publish(self._js, subjects.command_subject(key), encode(batch), msg_id=batch.id)
            except (NatsError, TimeoutError) as exc:
                log.warning("could not show the stall of %s on it (%s)", key, exc)
