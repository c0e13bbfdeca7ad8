"""One partition's consumer: fetch inputs, coalesce them per key, reconcile, publish, then ack.

Per fetched batch, the inputs of each key are coalesced into one reconcile (the snapshot is read from
KV, so the latest state is what matters, not each intermediate event); different keys of the batch are
reconciled concurrently and the next batch is fetched only when this one is done, so one key is never
reconciled twice at once. A message is acked only after the command batch it produced (every part of it,
when it is too large for one message) is stored by JetStream (invariant 5). A bus that does not answer
(NATS overloaded, restarting, a KV replica behind) is waited out in place, the inputs kept in progress, so
it never uses up their deliveries; a failure of the reconcile itself (or a message the server refuses) is
retried by redelivery with backoff and, after ``max_deliver`` attempts, parked in the dead-letter stream
with the reason (invariant 4); an undecodable message goes there at once. Nothing one message does (bytes
too deep or too large, a wrong schema, an exception anywhere in its reconcile) ends the partition: the
message is parked and the partition goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import MaxPayloadError
from nats.js import JetStreamContext
from nats.js.errors import APIError, ServiceUnavailableError
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from schema import subjects
from schema.codec import decode_input
from schema.config import OperatorConfig
from schema.decision import ReconcileFn
from schema.keys import KeyKind, ReconcileKey
from schema.messages import CONFLICT, LANDED, BusInput, TimerTick, is_backstop, is_resync, unrecorded_when_unchanged
from schema.parts import DEFAULT_MAX_PAYLOAD, part_budget
from services.reconciler.worker.applied import AppliedFloor
from services.reconciler.worker.carried import carried_write
from services.reconciler.worker.decide import decision_time, draft, min_revision
from services.reconciler.worker.inflight import InFlight, Recalled
from services.reconciler.worker.publishing import publish_decision
from services.reconciler.worker.reports import identity_only, owner_uid, report_failure
from services.reconciler.worker.resync import resync_at
from services.reconciler.worker.timers import SCHEDULER_HEADER, TimerScheduler
from services.runtime.backoff import Backoff, interruptible, retry
from services.runtime.bus import bus_unavailable
from services.runtime.deadletter import dead_letter_of, publish_dead_letter
from services.runtime.errors import RetryableError
from services.runtime.fetching import Linger, Puller
from services.runtime.health import Progress
from services.runtime.inprogress import kept_in_progress
from services.runtime.metrics import Tally, meter
from services.runtime.settings import BusSettings
from services.runtime.snapshots import SnapshotReader
from services.runtime.tracing import DECIDED, DECISION_STORED, SNAPSHOT_READ, extract_context, key_attributes, tracer

T = TypeVar("T")

log = logging.getLogger(__name__)
_tracer = tracer(__name__)
_meter = meter(__name__)
_reconciles = Tally(_meter, "raybus_reconciles_total", description="reconciles run")
_reconcile_seconds = _meter.create_histogram(
    "raybus_reconcile_duration_seconds", unit="s", description="snapshot read + reconcile + publish"
)
_lag_seconds = _meter.create_histogram(
    "raybus_bus_lag_seconds", unit="s", description="from the input's time to the start of its reconcile"
)
_dead_letters = Tally(_meter, "raybus_dead_letters_total", description="messages parked")
_backstops_answered = Tally(
    _meter,
    "raybus_backstop_ticks_answered_total",
    description="backstop ticks answered from memory, without a reconcile",
)
_resyncs_quiet = Tally(
    _meter, "raybus_resyncs_unchanged_total", description="resync decisions that had nothing to do (not recorded)"
)
_status_changes_quiet = Tally(
    _meter,
    "raybus_status_changes_unchanged_total",
    description="decisions on changes of a key's own status alone that had nothing to do (not recorded)",
)
_refusals_redecided = Tally(
    _meter,
    "raybus_refused_writes_redecided_total",
    description="keys decided again after the API refused a write as stale",
)

FETCH_BATCH = 256
FETCH_TIMEOUT = 1.0
KEY_CONCURRENCY = 64
DECIDING_AT_ONCE = 128
"""Keys a worker decides at once over all its partitions. Each holds its snapshot, its decision and the
encoded batch until published, so this bounds the worker's memory in a burst (16 partitions of
``KEY_CONCURRENCY`` keys would be 1,024 at once); on a few cores, more at once adds no throughput."""
TEND_INTERVAL = 0.25
REDELIVERY_BACKOFF = Backoff(base=0.5, cap=30.0)
"""Delay of the redelivery after a failed reconcile, by the number of deliveries so far."""
FENCED_REDELIVERY = 1.0
"""Seconds before inputs a fenced consumer handed back are delivered again (to the partition's holder)."""
BUS_RETRY = Backoff(base=0.2, cap=10.0)
"""Pauses while the bus does not answer a reconcile's reads and writes (tried again until it does)."""


async def settle(ack: Awaitable[None]) -> None:
    """Send an ack or nak; if the connection is down it is lost and the message simply comes back
    after ``ack_wait`` (every effect of a reconcile is idempotent), so this never fails the batch."""
    try:
        await ack
    except NatsError as exc:
        log.warning("ack/nak not sent (%s); the message will be redelivered", exc)


def checked_origin(message: BusInput, msg: Msg) -> BusInput:
    """``message`` if it came the way its kind must come: a timer tick only from its own key's schedule
    (whoever may publish schedules may name any target), anything else never from a schedule; a tick's
    time is at most the time the stream stored it, so a schedule cannot move a key's ``now`` ahead.

    Raises:
        ValueError: it did not.
    """
    scheduler = (msg.headers or {}).get(SCHEDULER_HEADER)
    if isinstance(message, TimerTick):
        own = subjects.timer_subject(message.key)
        if scheduler != own:
            raise ValueError(f"a timer tick must come from the schedule {own}, not {scheduler or 'a publisher'}")
        stored_at = msg.metadata.timestamp
        return msgspec.structs.replace(message, due_at=stored_at) if message.due_at > stored_at else message
    if scheduler is not None:
        raise ValueError(f"the schedule {scheduler} published a {type(message).__name__}, not a timer tick")
    return message


def _reason(exc: Exception) -> str:
    """A dead letter's reason: the exception's type (``RecursionError`` says more than its text) and text."""
    return f"{type(exc).__name__}: {exc}"


Recall = Callable[[ReconcileKey], Awaitable[list[Recalled]]]
"""Reads a key's recent decisions back from the commands stream."""


@dataclass
class _Item:
    msg: Msg
    message: BusInput


def bus_transient(exc: Exception) -> bool:
    """A failure of the bus, not of the reconcile: no answer, a reconnect, a KV replica behind. A message the
    server refuses (too large, a bad request) is not one: every try would meet it again."""
    if isinstance(exc, MaxPayloadError) or (isinstance(exc, APIError) and not isinstance(exc, ServiceUnavailableError)):
        return False
    return isinstance(exc, RetryableError) or bus_unavailable(exc)


@dataclass(frozen=True, slots=True)
class _Decided:
    """What the key's timer is set from, once its decision is stored."""

    wake_at: datetime | None
    applied_floor: int
    exists: bool = True
    """The key's custom resource is in the snapshot: a key whose resource is gone is not resynced."""


class PartitionConsumer:
    """Consumes one partition while this worker holds its lease."""

    def __init__(
        self,
        partition: int,
        *,
        nc: Client,
        js: JetStreamContext,
        reader: SnapshotReader,
        timers: TimerScheduler,
        reconcilers: Mapping[KeyKind, ReconcileFn],
        config: OperatorConfig,
        bus: BusSettings,
        lease_valid: Callable[[], bool],
        inflight: InFlight,
        applied: AppliedFloor,
        linger: Linger | None = None,
        progress: Progress | None = None,
        part_budget: int = part_budget(DEFAULT_MAX_PAYLOAD),
        recall: Recall | None = None,
        resync_period: float = 0.0,
        deciding: asyncio.Semaphore | None = None,
    ) -> None:
        self.partition = partition
        self._nc = nc
        self._js = js
        self._reader = reader
        self._timers = timers
        self._reconcilers = reconcilers
        self._config = config
        self._bus = bus
        self._lease_valid = lease_valid
        self._inflight = inflight
        self._applied = applied
        self._linger = linger or Linger(0.0, 0.0)
        self._progress = progress or Progress(f"partition {partition}")
        self._part_budget = part_budget
        self._recall = recall
        self._resync_period = resync_period
        self._recalled: set[ReconcileKey] = set()
        self._stopping = asyncio.Event()
        self._limit = asyncio.Semaphore(KEY_CONCURRENCY)
        self._deciding = deciding or asyncio.Semaphore(DECIDING_AT_ONCE)
        self._tended_at = float("-inf")

    @property
    def inflight(self) -> InFlight:
        """The memory of what this partition published (told of the applier's outcomes by ``results``)."""
        return self._inflight

    def request_stop(self) -> None:
        """Finish the batch in hand, then return from :meth:`run`."""
        self._stopping.set()

    async def run(self) -> None:
        """Fetch and process until asked to stop or the lease is no longer valid."""
        puller = Puller(self._nc, subjects.EVENTS_STREAM, subjects.partition_consumer(self.partition))
        try:
            while not self._stopping.is_set():
                if not self._lease_valid():
                    # Fenced: the lease was not renewed in time. Pause; the lease manager either renews
                    # it (and this resumes) or stops this consumer.
                    await asyncio.sleep(0.1)
                    continue
                try:
                    msgs = await self._linger.fetch(puller, FETCH_BATCH, timeout=FETCH_TIMEOUT)
                except TimeoutError:
                    await self._tend_memory()
                    continue
                except NatsError as exc:  # disconnected, server restarting: nats-py reconnects
                    log.warning("partition %d: fetch failed (%s); retrying", self.partition, exc)
                    await asyncio.sleep(FETCH_TIMEOUT)
                    continue
                if not self._lease_valid():
                    log.warning("partition %d: lease lapsed during a fetch; returning %d", self.partition, len(msgs))
                    await self._hand_back(msgs)
                    continue
                with self._progress.working():
                    await self.process(msgs)
                await self._tend_memory()
        finally:
            await puller.close()

    async def _tend_memory(self) -> None:
        """Forget commands no longer in flight; look again at keys that were waiting for that.

        At most every ``TEND_INTERVAL`` seconds: the applied floor it compares with is a request to the bus,
        refreshed only that often."""
        if time.monotonic() - self._tended_at < TEND_INTERVAL:
            return
        self._tended_at = time.monotonic()
        floor = await self._applied.get(self.partition)
        for key, wake_at in self._inflight.due(floor).items():
            try:
                await self._timers.schedule(key, wake_at or datetime.now(UTC), reason=LANDED)
            except NatsError as exc:  # the key's next event looks instead
                log.warning("partition %d: could not schedule a look at %s (%s)", self.partition, key, exc)
        for key, wake_at in self._inflight.refused(floor).items():
            try:
                await self._timers.schedule(key, wake_at, reason=CONFLICT)
            except NatsError as exc:  # the key's resync decides it again instead
                log.warning("partition %d: could not schedule a fresh decision of %s (%s)", self.partition, key, exc)
                continue
            _refusals_redecided.add(1, {"raybus.kind": key.kind})
        self._inflight.prune(floor)

    async def process(self, msgs: list[Msg]) -> None:
        """Decode, group by key, and reconcile each key once."""
        groups: dict[ReconcileKey, list[_Item]] = {}
        for msg in msgs:
            try:
                key = subjects.key_from_stored_subject(msg.subject)
                message = decode_input(msg.data)
                if message.key != key:
                    raise ValueError(f"message names key {message.key} but was published for {key}")
                message = identity_only(checked_origin(message, msg))
            except Exception as exc:  # whatever the bytes make the decoder do, the message is parked
                _dead_letters.add(1, {"stream": subjects.EVENTS_STREAM})
                log.warning(
                    "partition %d: dead-lettering seq %d: %s", self.partition, msg.metadata.sequence.stream, exc
                )
                await self._park(msg, f"undecodable input: {_reason(exc)}")
                continue
            groups.setdefault(key, []).append(_Item(msg, message))
        # reconciling a key of thousands of Pods (its snapshot read, its decision published in parts) can
        # outlast the ack wait, and inputs delivered again meanwhile would be reconciled twice
        async with kept_in_progress([i.msg for items in groups.values() for i in items], self._bus.ack_wait):
            await asyncio.gather(*(self._guarded(key, items) for key, items in groups.items()))

    async def _guarded(self, key: ReconcileKey, items: list[_Item]) -> None:
        async with self._limit, self._deciding:
            try:
                await self._reconcile_key(key, items)
            except Exception as exc:  # outside the reconcile's own guard: still only this key's inputs fail
                await self._fail(key, items, exc)

    async def _reconcile_key(self, key: ReconcileKey, items: list[_Item]) -> None:
        if await self._answered_from_memory(key, items):
            return
        inputs = [item.message for item in items]
        now = decision_time(inputs)
        started = time.perf_counter()
        parent = extract_context(items[0].msg.headers)
        attributes: dict[str, str | int] = {**key_attributes(key), "raybus.inputs": len(items)}
        with _tracer.start_as_current_span(
            "reconcile", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
        ) as span:
            lag = max(0.0, time.time() - now.timestamp())
            _lag_seconds.record(lag, {"raybus.kind": key.kind, "partition": str(self.partition)})
            try:
                decided = await self._on_the_bus(key, lambda: self._decide_and_publish(key, items, span))
                if decided is None:
                    await self._hand_back([item.msg for item in items])
                    return
                await self._on_the_bus(key, lambda: self._schedule(key, inputs, decided))
            except Exception as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                if self._gave_up() and bus_transient(exc):
                    await self._hand_back([item.msg for item in items])
                else:
                    await self._fail(key, items, exc)
                return
        for item in items:
            await settle(item.msg.ack())
        _reconciles.add(1, {"raybus.kind": key.kind})
        elapsed = time.perf_counter() - started
        _reconcile_seconds.record(elapsed, {"raybus.kind": key.kind})
        if log.isEnabledFor(logging.DEBUG):
            finished = time.time()
            log.debug(
                "reconciled %s",
                key,
                extra={"raybus.key": str(key), "started": finished - elapsed, "finished": finished},
            )

    async def _decide_and_publish(self, key: ReconcileKey, items: list[_Item], span: Span) -> _Decided | None:
        """Read the key's snapshot, decide, and publish what is not already in flight; None when the lease
        lapsed meanwhile. Safe to run again after a failure: until ``published``, the in-flight memory only
        holds this decision as pending, and its parts are de-duplicated by their message ids."""
        inputs = [item.message for item in items]
        # The applier's floor is read beside the snapshot, not after it: on an idle stack each is a round
        # trip on the path of a change. Read first, it can only be lower, which keeps commands in flight
        # a moment longer, never shorter. A key with no command in flight is decided the same on any
        # floor (it has none to settle), so it does not wait for the read, which goes on for the next.
        floor_read = asyncio.ensure_future(self._applied.get(self.partition))
        try:
            writes = [write for item in items if (write := carried_write(item.msg.data, item.message)) is not None]
            snapshot = await self._reader.read(key, min_revision=min_revision(inputs), writes=writes)
            span.add_event(SNAPSHOT_READ, {"raybus.snapshot_revision": snapshot.revision})
            drafted = draft(
                reconcilers=self._reconcilers,
                snapshot=snapshot,
                now=decision_time(inputs),
                config=self._config,
                sequences=[item.msg.metadata.sequence.stream for item in items],
            )
            await self._take_over(key)
            floor = await floor_read if self._inflight.sending(key) else self._applied.known(self.partition)
        finally:
            floor_read.cancel()  # a no-op once it is done
        if not self._lease_valid():
            # Fenced while deciding (the process was starved past its lease): another worker may hold the
            # partition by now, so this decision is dropped, never published beside that worker's, and
            # its inputs go back to whoever holds the partition.
            log.warning("partition %d: lease lapsed while reconciling %s; returning its inputs", self.partition, key)
            span.set_attribute("raybus.fenced", True)
            return None
        batch = self._inflight.filter(drafted.batch, applied_floor=floor, entries=snapshot.entries, ids=drafted.ids())
        span.add_event(DECIDED)
        span.set_attribute("raybus.rules", list(drafted.decision.rules))
        span.set_attribute("raybus.commands", len(batch.commands))
        span.set_attribute("raybus.suppressed", len(batch.suppressed))
        decided = _Decided(wake_at=drafted.decision.wake_at, applied_floor=floor, exists=snapshot.owner() is not None)
        if not batch.commands and not batch.suppressed and all(unrecorded_when_unchanged(m) for m in inputs):
            # A resync that found nothing to do is not recorded: at 10,000 idle keys the decision log would
            # otherwise grow by a message per key and period, each read by an applier for nothing. Nor is
            # the echo of a status write: a third of a burst's decisions, on which KubeRay does not reconcile.
            span.set_attribute("raybus.unchanged", True)
            if all(is_resync(message) for message in inputs):
                _resyncs_quiet.add(1, {"raybus.kind": key.kind})
            else:
                _status_changes_quiet.add(1, {"raybus.kind": key.kind})
            return decided
        last_seq = await publish_decision(self._js, batch, budget=self._part_budget)
        span.add_event(DECISION_STORED, {"raybus.decision_seq": last_seq})
        self._inflight.published(key, last_seq)
        return decided

    async def _schedule(self, key: ReconcileKey, inputs: list[BusInput], decided: _Decided) -> None:
        """Set the key's durable timer after its decision is stored: its wake-up or, when that is later or
        none, its resync; or a backstop behind what the in-flight memory holds for it; or none (the key's
        resource is gone, or resync is off)."""
        if any(isinstance(message, TimerTick) for message in inputs):
            self._timers.forget(key)
        wake_at = decided.wake_at
        resync = resync_at(key, datetime.now(UTC), self._resync_period) if decided.exists else None
        if resync is not None and (wake_at is None or resync < wake_at):
            # Not held while commands are in flight, unlike a wake-up: it comes long after they landed.
            if self._inflight.holds(key):
                await self._arm_backstop(key)
            else:
                await self._timers.resync(key, resync)
        elif wake_at is not None and not self._inflight.defer(key, wake_at, applied_floor=decided.applied_floor):
            await self._timers.schedule(key, wake_at, over_backstop=not self._inflight.holds(key))
        elif self._inflight.holds(key):
            await self._arm_backstop(key)
        else:
            await self._timers.cancel(key)

    async def _arm_backstop(self, key: ReconcileKey) -> None:
        """What waits in the in-flight memory is lost if the partition moves or the worker dies: a durable
        tick stands behind it, at most max_age later than it would have come."""
        backstop = datetime.now(UTC) + timedelta(seconds=self._inflight.max_age)
        wake_at = self._inflight.held_wake(key)
        await self._timers.backstop(key, max(backstop, wake_at) if wake_at is not None else backstop)

    async def _answered_from_memory(self, key: ReconcileKey, items: list[_Item]) -> bool:
        """When ``items`` are only backstop ticks of a key whose look or wake-up this memory still holds,
        ack them and arm the backstop again instead of reconciling; returns whether it did.

        Such a tick brings nothing: the memory schedules the key's tick itself once its commands have
        landed or expired, and a reconcile now would decide what is in flight again (under a long applier
        queue, every ``max_age`` for every key that waits)."""
        if not self._inflight.holds(key) or not all(is_backstop(item.message) for item in items):
            return False
        self._timers.forget(key)  # the tick has fired
        try:
            await self._on_the_bus(key, lambda: self._arm_backstop(key))
        except Exception as exc:
            await self._fail(key, items, exc)
            return True
        for item in items:
            await settle(item.msg.ack())
        _backstops_answered.add(1, {"raybus.kind": key.kind})
        return True

    async def _on_the_bus(self, key: ReconcileKey, step: Callable[[], Awaitable[T]]) -> T:
        """Run ``step`` until the bus lets it through. A bus that does not answer is no failure of the
        reconcile: the step is tried again in place (its inputs kept in progress) rather than redelivered,
        so an overloaded NATS never uses up an input's deliveries and dead-letters it."""
        return await retry(
            step,
            BUS_RETRY,
            transient=bus_transient,
            give_up=self._gave_up,
            on_retry=lambda exc, failures, delay: log.warning(
                "partition %d: the bus failed the reconcile of %s %d time(s) (%s); trying again in %.1fs",
                self.partition,
                key,
                failures,
                exc,
                delay,
            ),
            sleep=interruptible(self._stopping),
        )

    def _gave_up(self) -> bool:
        """The partition is being stopped or its lease lapsed: what is in hand goes back, uncounted."""
        return self._stopping.is_set() or not self._lease_valid()

    async def _hand_back(self, msgs: list[Msg]) -> None:
        """Return inputs unprocessed, for whoever holds the partition once this worker's lease lapsed."""
        for msg in msgs:
            await settle(msg.nak(delay=FENCED_REDELIVERY))

    async def _park(self, msg: Msg, reason: str) -> None:
        """Dead-letter ``msg``; if NATS is unreachable it stays unacked and comes back later."""
        try:
            await publish_dead_letter(self._js, dead_letter_of(msg, stream=subjects.EVENTS_STREAM, error=reason))
            await settle(msg.ack())
        except (NatsError, TimeoutError) as exc:
            log.warning("partition %d: could not dead-letter (%s); it will be redelivered", self.partition, exc)

    async def _take_over(self, key: ReconcileKey) -> None:
        """The first time this consumer reconciles ``key``: restore what earlier owners of the partition
        published for it and may still be in flight (``handover.py``)."""
        if self._recall is None or key in self._recalled:
            return
        self._inflight.restore(key, await self._recall(key))
        self._recalled.add(key)

    async def _owner_uid(self, key: ReconcileKey, inputs: list[BusInput]) -> str:
        """The custom resource's uid, so that its Warning Event is listed with it (best effort)."""
        uid = owner_uid(key, inputs)
        if uid:
            return uid
        try:
            owner = (await self._reader.read(key, attempts=1)).owner()
        except (RetryableError, NatsError):
            return ""
        return str(((owner or {}).get("metadata") or {}).get("uid") or "")

    async def _resync_after_failure(self, key: ReconcileKey, items: list[_Item]) -> None:
        """A key whose inputs were dead-lettered is still tried again at its resync (what failed may have been
        fixed since, by an upgrade or an edit of the resource), as KubeRay requeues a failing key forever."""
        due = resync_at(key, datetime.now(UTC), self._resync_period)
        if due is None:
            return
        if any(isinstance(item.message, TimerTick) for item in items):
            self._timers.forget(key)
        try:
            await self._timers.resync(key, due)
        except NatsError as exc:
            log.warning("partition %d: could not schedule the resync of %s (%s)", self.partition, key, exc)

    async def _fail(self, key: ReconcileKey, items: list[_Item], exc: Exception) -> None:
        deliveries = max(item.msg.metadata.num_delivered for item in items)
        if deliveries >= self._bus.max_deliver or isinstance(exc, KeyError):
            reason = f"reconcile of {key} failed {deliveries} time(s): {_reason(exc)}"
            if isinstance(exc, KeyError):
                reason = f"no reconciler for kind {key.kind}"
            log.error("partition %d: dead-lettering %d input(s): %s", self.partition, len(items), reason)
            _dead_letters.add(len(items), {"stream": subjects.EVENTS_STREAM})
            for item in items:
                await self._park(item.msg, reason)
            await report_failure(
                self._js,
                key,
                uid=await self._owner_uid(key, [item.message for item in items]),
                sequences=[item.msg.metadata.sequence.stream for item in items],
                reason=f"{reason}; its {len(items)} input(s) are in the dead-letter stream",
            )
            await self._resync_after_failure(key, items)
            return
        delay = REDELIVERY_BACKOFF.delay(deliveries)
        log.warning(
            "partition %d: reconcile of %s failed (attempt %d), retrying in %.1fs: %s",
            self.partition,
            key,
            deliveries,
            delay,
            exc,
            extra={"raybus.key": str(key)},
            exc_info=True,
        )
        for item in items:
            await settle(item.msg.nak(delay=delay))
