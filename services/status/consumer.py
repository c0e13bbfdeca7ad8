"""Consuming RAYBUS_RESULTS into the status database: fetch a batch, persist it, then ack.

A fetch that brings several results waits a moment for more (``fetching.Linger``, a window that widens
while a burst lasts): a transaction costs about as much for a few rows as for a few hundred, and in a
burst results arrive a handful at a time.

Invariant 5 lives here: a message is acked only after the transaction holding it has committed. A
crash or a stop between the two leaves it unacked, JetStream redelivers it, and the store's natural keys
make the second insert a no-op. Several status replicas share the durable ``STATUS_CONSUMER``.

Per batch:

1. decode every message into its results (an applier's run sends them together, ``ResultBatch``); one
   that holds no results (too deep, too large, a wrong schema) or a transition without a uid is
   dead-lettered (``DeadLetter`` on ``raybus.dlq.RAYBUS_RESULTS`` with the reason, de-duplicated by stream
   sequence) and acked, so garbage never blocks the stream;
2. persist the good ones in one transaction, inside one ``status.persist`` span per result that continues
   the span of its command (the result's ``traceparent``, else the trace its message's headers carry);
3. on a retryable database error (down, deadlock), retry the *same* batch with backoff while the
   messages are kept in progress: nak-ing would burn deliveries (``max_deliver``) and could lose
   history during a long outage. On a permanent error (data the database refuses) or any other
   exception, split the batch to find the culprit, dead-letter its message and persist the rest;
4. ack each message.

The batch is kept in progress while all this runs (splitting it on a busy machine can outlast the ack
wait), so it is not delivered again, persisted and dead-lettered twice, behind its own back.

A stop request is honoured between batches: the batch in flight is finished (committed and acked)
first; if the database is down at that moment, the batch is left unacked for another replica.
Not here: SQL (``store``), HTTP (``api``), process wiring (``service``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from schema import codec, subjects
from schema.messages import CommandResult
from services.runtime.aio import raise_if_cancelling
from services.runtime.backoff import Backoff, interruptible, retry
from services.runtime.bus import bus_unavailable
from services.runtime.clock import Clock, utc_now
from services.runtime.deadletter import dead_letter_of, publish_dead_letter
from services.runtime.errors import RetryableError
from services.runtime.fetching import Linger, Puller
from services.runtime.health import Progress
from services.runtime.inprogress import kept_in_progress
from services.runtime.metrics import Tally, meter
from services.runtime.publishing import AckedJetStream
from services.runtime.tracing import current_trace_id, extract_context, key_attributes
from services.runtime.tracing import tracer as get_tracer
from services.status.metrics import ResourceMetrics
from services.status.store import ResultRecord, StatusStore

log = logging.getLogger(__name__)
_meter = meter(__name__)
_consumed = Tally(_meter, "raybus_status_results_consumed", unit="{message}", description="Command results persisted")
_persisted = Tally(
    _meter, "raybus_status_transitions_persisted", unit="{transition}", description="New transition rows"
)
_dead = Tally(
    _meter, "raybus_status_dead_letters", unit="{message}", description="Results sent to the dead-letter stream"
)


RETRY_BACKOFF = Backoff(base=0.1, cap=5.0)
"""Pauses between attempts to persist a batch while the database is unavailable, and between fetches
while NATS is."""

DEFAULT_ACK_WAIT = 30.0
"""JetStream's ack wait, for a consumer whose configuration leaves it unset."""


@dataclass
class _Item:
    msg: Msg
    record: ResultRecord
    span: Span


class ResultConsumer:
    """Moves command results from the bus into the store, one batch at a time."""

    def __init__(
        self,
        nc: Client,
        store: StatusStore,
        *,
        batch_size: int = 256,
        fetch_timeout: float = 0.5,
        linger: Linger | None = None,
        retry_backoff: Backoff = RETRY_BACKOFF,
        clock: Clock = utc_now,
        tracer: Tracer | None = None,
        metrics: ResourceMetrics | None = None,
    ) -> None:
        """Args:
        nc: the service's connection.
        store: where results go.
        batch_size: messages per fetch, and so per transaction.
        fetch_timeout: seconds one fetch waits for messages; bounds how long a stop request waits.
        linger: how long a fetch of several results waits for more to join its transaction (default: a
            window that widens while a burst lasts).
        retry_backoff: pauses while the database (or NATS) is unavailable.
        clock: time of dead letters.
        tracer: where ``status.persist`` spans go (default: the process's tracer provider).
        metrics: custom-resource metrics fed with each persisted batch (none by default).
        """
        self._nc = nc
        self._js = AckedJetStream(nc)
        self._store = store
        self._batch_size = batch_size
        self._fetch_timeout = fetch_timeout
        self._linger = linger or Linger()
        self._retry_backoff = retry_backoff
        self._clock = clock
        self._tracer = tracer or get_tracer(__name__)
        self._metrics = metrics
        self.progress = Progress("status consumer")
        self.running = False
        """Bound to its consumer and fetching (the service is not ready before)."""
        self._lag = 0
        _meter.create_observable_gauge(
            "raybus_status_lag",
            callbacks=[self._observe_lag],
            unit="{message}",
            description="Results waiting in RAYBUS_RESULTS behind the last fetched one",
        )

    def readiness(self) -> str | None:
        """Why the service is not ready on the consumer's account, or None."""
        return self.progress.stalled() if self.running else "not consuming results yet"

    def _observe_lag(self, _: CallbackOptions) -> Iterable[Observation]:
        yield Observation(self._lag)

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, then return after finishing the batch in flight."""
        puller = Puller(self._nc, subjects.RESULTS_STREAM, subjects.STATUS_CONSUMER)
        failures = 0
        try:
            try:
                # NATS may be restarting while this service starts: wait for it as the fetch loop does.
                info = await retry(
                    functools.partial(self._js.consumer_info, subjects.RESULTS_STREAM, subjects.STATUS_CONSUMER),
                    self._retry_backoff,
                    transient=bus_unavailable,
                    give_up=stop.is_set,
                    on_retry=lambda exc, _, seconds: log.warning(
                        "reading the results consumer failed (%s); retrying in %.2fs", exc, seconds
                    ),
                    sleep=interruptible(stop),
                )
            except Exception:
                if stop.is_set():
                    return
                raise
            ack_wait = info.config.ack_wait or DEFAULT_ACK_WAIT
            self.running = True
            while not stop.is_set():
                try:
                    msgs = await self._linger.fetch(puller, self._batch_size, timeout=self._fetch_timeout)
                except TimeoutError:  # nothing to do right now
                    raise_if_cancelling()
                    continue
                except nats.errors.Error as exc:  # reconnecting, consumer briefly unavailable, ...
                    failures += 1
                    log.warning("fetching results failed: %s", exc)
                    await interruptible(stop)(self._retry_backoff.delay(failures))
                    continue
                failures = 0
                raise_if_cancelling()
                with self.progress.working():
                    async with kept_in_progress(msgs, ack_wait):
                        await self._handle(msgs, stop)
        finally:
            await puller.close()

    async def _handle(self, msgs: list[Msg], stop: asyncio.Event) -> None:
        items: list[_Item] = []
        dead: list[tuple[Msg, str]] = []
        for msg in msgs:
            try:
                results = codec.decode_results(msg.data)
            except Exception as exc:  # whatever the bytes make the decoder do, the message is parked
                dead.append((msg, f"not command results: {type(exc).__name__}: {exc}"))
                continue
            unplaced = next((r for r in results if any(not t.uid for t in r.transitions)), None)
            if unplaced is not None:
                # a step without a uid belongs to no incarnation; stored, it would merge unrelated resources
                # the id comes off the bus: quoted and cut short in the letter and the log
                dead.append((msg, f"a transition of {unplaced.command_id[:100]!r} has no uid"))
                continue
            carried = extract_context(msg.headers)
            items.extend(self._item(msg, result, carried) for result in results)
        if msgs:
            self._lag = msgs[-1].metadata.num_pending
        try:
            refused = await self._persist(items, stop)
        except BaseException as exc:  # recorded on the spans, then re-raised (cancellation included)
            for item in items:
                item.span.record_exception(exc)
            raise
        finally:
            for item in items:
                item.span.end()
        if refused is None:
            log.warning("stopping with %d results unpersisted; they stay unacked for redelivery", len(items))
            return
        reasons: dict[int, list[str]] = {}
        for msg, reason in [*dead, *refused]:
            reasons.setdefault(id(msg), []).append(reason)
        for msg in msgs:
            if id(msg) not in reasons:
                with contextlib.suppress(nats.errors.Error):  # lost: redelivered, the insert is a no-op then
                    await msg.ack()
        for msg in msgs:
            if id(msg) in reasons:
                await self._dead_letter(msg, "; ".join(dict.fromkeys(reasons[id(msg)])))

    def _item(self, msg: Msg, result: CommandResult, carried: Context) -> _Item:
        """One result of ``msg`` to persist, inside a span that continues the command's span (its own
        ``traceparent``, else the one ``msg`` carried in its headers: ``carried``)."""
        context = extract_context({"traceparent": result.traceparent}) if result.traceparent else carried
        span = self._tracer.start_span(
            "status.persist",
            context=context,
            attributes={
                **key_attributes(result.key),
                "raybus.command.verb": result.verb,
                "raybus.resource_version": result.resource_version,
            },
        )
        sequence = msg.metadata.sequence.stream
        record = ResultRecord(result=result, stream_seq=sequence, trace_id=result.trace_id or current_trace_id(context))
        return _Item(msg=msg, record=record, span=span)

    async def _persist(self, items: list[_Item], stop: asyncio.Event) -> list[tuple[Msg, str]] | None:
        """Persist ``items``; return the messages the database refused, or None when stopped first."""
        if not items:
            return []
        try:
            stats = await retry(
                lambda: self._store.persist([item.record for item in items]),
                self._retry_backoff,
                transient=lambda exc: isinstance(exc, RetryableError),
                give_up=stop.is_set,
                on_retry=lambda exc, failures, seconds: log.warning(
                    "persisting %d results failed (attempt %d): %s; retrying in %.2fs",
                    len(items),
                    failures,
                    exc,
                    seconds,
                ),
                sleep=interruptible(stop),
            )
        except RetryableError:  # still unavailable when the stop came
            return None
        except Exception as exc:  # refused, or a result the store cannot handle: find which one
            if len(items) == 1:
                items[0].span.set_status(Status(StatusCode.ERROR, str(exc)))
                return [(items[0].msg, f"refused by the database: {type(exc).__name__}: {exc}")]
            middle = len(items) // 2
            refused: list[tuple[Msg, str]] = []
            for half in (items[:middle], items[middle:]):
                more = await self._persist(half, stop)
                if more is None:
                    return None
                refused.extend(more)
            return refused
        _consumed.add(stats.results)
        _persisted.add(stats.transitions)
        if self._metrics is not None:
            self._metrics.observe(stats)
        return []

    async def _dead_letter(self, msg: Msg, reason: str) -> None:
        meta = msg.metadata
        letter = dead_letter_of(msg, stream=subjects.RESULTS_STREAM, error=reason, at=self._clock())
        try:
            await publish_dead_letter(self._js, letter)
        except (nats.errors.Error, TimeoutError) as exc:  # left unacked: redelivered and retried later
            log.warning("dead-lettering result %d failed: %s", meta.sequence.stream, exc)
            return
        log.warning("dead-lettered result %d from %s: %s", meta.sequence.stream, msg.subject, reason)
        _dead.add(1)
        with contextlib.suppress(nats.errors.Error):  # lost: redelivered and parked again (de-duplicated)
            await msg.ack()
