"""The applier: consume command batches, apply them to the API server and dashboards, publish outcomes.

Role: the commands stream is partitioned like the events (a key's batches are stored in its partition);
the applier replicas share the partitions through leases (group ``apply``, ``services.runtime.leases``),
and each partition's durable pull consumer (``subjects.applier_consumer``) delivers its
:class:`CommandBatch` messages to the replica holding it. Batches of one key are applied one at a time,
in stream order; batches of different keys run concurrently (``KubeSettings.applier_concurrency``),
kopf's per-object queue. When a partition moves (a replica joins, leaves or is fenced), its running
batches finish, its queued ones are nak'ed and so delivered to the next holder: nothing is applied by two
replicas at once. Inside a batch, commands run in order; each gets a span ``applier.<verb>`` that
continues the trace carried by the batch's headers and ends in an outcome (:class:`CommandResult`); the
run's outcomes are published together to the key's results subject (``reports``), and only then is the
batch acknowledged. Runs of Pod creates, Pod deletes and Events go out side by side (``waves``): a
scale-up's thousand creates are not sent one at a time.

Invariants:
- A malformed batch (too deep, too large, a wrong schema) goes to the dead-letter stream with the
  decode error and is acked: it never crashes the applier or blocks its key. So does a batch whose
  handling raises: the key's later batches proceed.
- A batch is acked only after every command's result is published (those of a run cut short too). A
  stop mid-batch leaves it unacked (queued batches are nak'ed), so JetStream redelivers it; commands are
  idempotent (``plan``).
- Outcomes follow ``plan.outcome_of_error`` / ``plan.RETRY_BACKOFF``; nothing raised by a command escapes
  as an exception (kopf's outcome discipline), except cancellation: a command that raises is ``failed``.
- A command is executed only if ``authorize`` allows it for its batch's key (when the applier has
  facts: the watcher always gives it its projection), its content follows from the key's custom
  resource (``provenance``) and its batch is no replay of an older decision (``freshness``, whose
  memory the replicas share in KV ``raybus-applied``). A denied command gets the outcome ``denied``
  with the reason, a warning log, ``raybus_commands_denied_total``
  and a Warning Event ``CommandDenied`` on the key's custom resource (when it exists); a command whose
  target was deleted meanwhile gets the outcome a 404 would have meant, without a call.
- Every batch received and not yet acked is kept in progress (``kept_in_progress``), also while it waits
  behind its key's earlier batches (a decision in parts is many batches of one key) or retries a call:
  one waiting longer than the ack wait would be delivered again and applied twice.
- ``raybus.io/generate: auth_token`` Secrets get a fresh token here (the only randomness of the
  pipeline); the token never appears in a log, a span or a result.

Not here: what the calls are (``plan``, ``dashboard``), how they are sent (``kubeapi``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import logging
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.kv import KeyValue
from opentelemetry.context import Context
from opentelemetry.trace import Tracer

from schema import codec, subjects
from schema.config import OperatorConfig
from schema.keys import ReconcileKey
from schema.messages import (
    TAKEN_EFFECT,
    Command,
    CommandBatch,
    CommandResult,
    EmitEvent,
    ObjectRef,
    Outcome,
    PatchStatus,
    PutServeConfig,
    StopRayJob,
    SubmitRayJob,
    command_target,
    command_verb,
)
from services.edge import pipeline_metrics
from services.edge.apply.authorize import Allowed, Facts, Gone, command_kind
from services.edge.apply.checks import BatchChecks
from services.edge.apply.freshness import Freshness, WrittenStatus
from services.edge.apply.plan import RETRY_BACKOFF, is_transient, outcome_of_error, plan_call, requested_delay
from services.edge.apply.reports import RunReport, run_id
from services.edge.apply.staleness import DecisionCheck, OwnerView
from services.edge.apply.throttle import RateLimiter
from services.edge.apply.waves import WAVE_CONCURRENCY, waves
from services.edge.calls import ApiError
from services.edge.dashboard import DashboardClient, DashboardOutcome
from services.edge.kubeapi import KubeApi, Response
from services.edge.resources import by_kind
from services.runtime.aio import cancel_and_wait, raise_if_cancelling
from services.runtime.backoff import Backoff, retry
from services.runtime.bus import bus_unavailable, publish
from services.runtime.clock import Clock, utc_now
from services.runtime.deadletter import dead_letter_of, destination
from services.runtime.errors import PermanentError
from services.runtime.fetching import Puller
from services.runtime.health import Progress
from services.runtime.inprogress import kept_in_progress
from services.runtime.leases import Membership, PartitionLeases
from services.runtime.metrics import Tally, meter
from services.runtime.publishing import AckedJetStream
from services.runtime.settings import BusSettings
from services.runtime.tracing import current_trace_id, current_traceparent, extract_context, key_attributes, tracer

log = logging.getLogger(__name__)
_tracer = tracer(__name__)
_denied = Tally(
    meter(__name__), "raybus_commands_denied_total", description="commands outside their key's authority, not executed"
)

DENIED_REASON: Final = "CommandDenied"
"""Reason of the Warning Event a denied command leaves on its key's custom resource."""

FETCH_TIMEOUT: Final = 1.0
"""Seconds one fetch waits for messages (also how quickly a stop is noticed)."""
FACTS_WAIT: Final = 20.0
"""Seconds a batch waits for the facts to reach its snapshot before it is authorized on older ones."""
FENCE_POLL: Final = 0.1
"""Seconds between looks at a lapsed lease (renewed, or its partition stopped)."""
STOP_GRACE: Final = 2.0
"""Seconds a cancelled fetch or worker gets to end when a partition stops."""
PUBLISH_BACKOFF: Final = Backoff(base=0.05, cap=2.0)
"""Pauses between attempts of a result or dead-letter publish, retried until it is stored."""


class _Meta(msgspec.Struct):
    resourceVersion: str = ""


class _Head(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


_head_decoder: Final[msgspec.json.Decoder[_Head]] = msgspec.json.Decoder(_Head)

FailureHook = Callable[[CommandBatch, Command | None, str], Awaitable[None]]
"""Shows a command (None: a whole batch) that failed after its retries on the key's resource (``failures``)."""


def generate_token(kind: str) -> str:
    """A fresh value for a ``raybus.io/generate`` Secret key: base64 of 32 random bytes (KubeRay's)."""
    return base64.b64encode(secrets.token_bytes(32)).decode()


def execution_id(batch: CommandBatch, index: int, command: Command, *, batch_seq: int = 0, delivery: int = 1) -> str:
    """The name of one execution of a command (of the Warning Event its denial emits): the same when that
    execution repeats a write, different for each delivery of the batch."""
    return f"{batch.id}/{command.id or index}/{batch_seq}/{delivery}"


@dataclass(frozen=True, kw_only=True)
class Applied:
    """What happened to one command (before it becomes a CommandResult)."""

    outcome: Outcome
    status_code: int = 0
    error: str = ""
    resource_version: str = ""


class _Consumer(NamedTuple):
    """A partition this replica holds: its fetch loop, and the id of this holding of it (one per start).

    ``freshness`` trusts what it wrote to the bucket under a holding that still lasts, as no other replica
    writes the partition's keys meanwhile."""

    done: asyncio.Event
    task: asyncio.Task[None]
    puller: Puller
    holding: int


class Applier:
    """Applies command batches; one instance per watcher process."""

    def __init__(
        self,
        nc: Client,
        api: KubeApi | None,
        *,
        membership: Membership,
        dashboard: DashboardClient | None = None,
        concurrency: int = 32,
        clock: Clock = utc_now,
        tracer: Tracer | None = None,
        generate: Callable[[str], str] = generate_token,
        exit_timeout: float = 20.0,
        api_backoff: Backoff = RETRY_BACKOFF,
        qps: float = 0.0,
        burst: int | None = None,
        max_deliver: int = 0,
        ack_wait: float = BusSettings.ack_wait,
        result_batches: bool = BusSettings.result_batches,
        on_failure: FailureHook | None = None,
        owners: OwnerView | None = None,
        facts: Facts | None = None,
        config: OperatorConfig | None = None,
        applied: KeyValue | None = None,
    ) -> None:
        self._nc = nc
        self._js = AckedJetStream(nc)
        self._facts = facts
        self._config = config if config is not None else OperatorConfig()
        self._freshness = Freshness(floors=applied)
        self._written = WrittenStatus()
        self._api = api
        self._dashboard = dashboard
        self._concurrency = max(1, concurrency)
        self._slots = asyncio.Semaphore(self._concurrency)
        self._clock = clock
        self._tracer = tracer or _tracer
        self._generate = generate
        self._exit_timeout = exit_timeout
        self._result_batches = result_batches
        self._api_backoff = api_backoff
        self._limiter = RateLimiter(qps, burst=burst)
        self._max_deliver = max_deliver
        self._ack_wait = ack_wait
        self._on_failure = on_failure
        self._decisions = DecisionCheck(self._js, owners)
        self._queues: dict[ReconcileKey, deque[tuple[Msg, CommandBatch]]] = {}
        pipeline_metrics.track_queue(self)
        self._workers: dict[ReconcileKey, asyncio.Task[None]] = {}
        self._partition_of: dict[ReconcileKey, int] = {}
        """The partition of every key with queued batches or a running worker."""
        self._unacked: dict[int, Msg] = {}
        """Batches received from JetStream and not yet acked or nak'ed (by ``id``: a Msg is unhashable)."""
        self._outstanding = 0
        self._room = asyncio.Event()
        """Set while fewer batches than the bound are outstanding: what a partition's fetch waits for."""
        self._room.set()
        self._membership = membership
        self._leases: PartitionLeases | None = None
        self._consumers: dict[int, _Consumer] = {}
        self._holdings = itertools.count(1)
        self._halt = asyncio.Event()
        self._crash: BaseException | None = None
        self.progress = Progress("applier")
        self.batches_applied = 0
        self.dead_letters = 0
        self.denied = 0

    # --- consuming ----------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Apply the batches of the partitions this replica holds until ``stop`` is set, then drain them
        (each finishes its running batches within the exit timeout) and release their leases.

        Raises:
            RuntimeError: a partition's consumer or a key's worker crashed (after the others drained).
        """
        halt = asyncio.Event()
        self._halt = halt
        leases = PartitionLeases(self._membership, "apply", start=self._start_partition, stop=self._stop_partition)
        self._leases = leases
        watching = asyncio.create_task(self._halt_on(stop, halt), name="applier-stop")
        try:
            async with kept_in_progress(self._unacked.values(), self._ack_wait):
                await leases.run(halt)
        finally:
            watching.cancel()
            for partition in list(self._consumers):
                await self._stop_partition(partition)
        if self._crash is not None:
            raise RuntimeError("an applier partition or key worker crashed") from self._crash

    async def _halt_on(self, stop: asyncio.Event, halt: asyncio.Event) -> None:
        await stop.wait()
        halt.set()

    async def _start_partition(self, partition: int) -> None:
        puller = Puller(self._nc, subjects.COMMANDS_STREAM, subjects.applier_consumer(partition))
        done = asyncio.Event()
        task = asyncio.create_task(self._consume(partition, puller, done), name=f"applier-partition-{partition}")
        task.add_done_callback(self._on_done)
        self._consumers[partition] = _Consumer(done, task, puller, next(self._holdings))

    def _on_done(self, task: asyncio.Task[None]) -> None:
        """A partition's consumer or a key's worker ended: one that raised halts the applier (``run``)."""
        if not task.cancelled() and task.exception() is not None and self._crash is None:
            self._crash = task.exception()
            self._halt.set()

    async def _stop_partition(self, partition: int) -> None:
        """Stop fetching, let the partition's running batches finish (within the exit timeout; a partition
        whose lease was lost cancels them at once), nak its queued ones."""
        entry = self._consumers.pop(partition, None)
        if entry is None:
            return
        done, task, puller, _ = entry
        done.set()
        try:
            await asyncio.wait([task], timeout=FETCH_TIMEOUT + STOP_GRACE)
            await cancel_and_wait([task], timeout=STOP_GRACE)
            workers = [t for k, t in self._workers.items() if self._partition_of.get(k) == partition]
            if workers:
                # A lost lease may be another replica's already, and until this stop is over this replica
                # cannot claim the partition again: waiting for a batch that waits (for facts, for the API
                # server) left it without partitions for longer than a lease lives. Its batches are handed
                # back and applied again by the partition's holder; commands are idempotent.
                lost = self._leases is not None and self._leases.lost(partition)
                pending = set(workers) if lost else (await asyncio.wait(workers, timeout=self._exit_timeout))[1]
                lingering = await cancel_and_wait(pending, timeout=STOP_GRACE)
                if lingering:
                    log.warning("%d applier workers of partition %d did not stop", len(lingering), partition)
            for key in [k for k, p in self._partition_of.items() if p == partition]:
                await self._hand_back(key)
        finally:
            with contextlib.suppress(Exception):
                await puller.close()

    async def _hand_back(self, key: ReconcileKey) -> None:
        """Nak a key's queued batches (its partition is stopping or no longer this replica's): JetStream
        delivers them again, to whichever replica holds the partition then."""
        queue = self._queues.pop(key, deque())
        if key not in self._workers:
            self._partition_of.pop(key, None)
        for msg, _ in queue:
            self._settled()
            self._unacked.pop(id(msg), None)
            with contextlib.suppress(Exception):
                await msg.nak()

    async def _consume(self, partition: int, puller: Puller, done: asyncio.Event) -> None:
        while not done.is_set():
            raise_if_cancelling()
            room = self._bound() - self._outstanding
            if room <= 0:
                self._room.clear()
                with contextlib.suppress(TimeoutError):  # looks at ``done`` as often as a fetch would
                    await asyncio.wait_for(self._room.wait(), FETCH_TIMEOUT)
                continue
            try:
                messages = await puller.fetch(min(room, 256), timeout=FETCH_TIMEOUT)
            except TimeoutError:  # nothing stored meanwhile
                raise_if_cancelling()
                continue
            except nats.errors.Error as exc:
                raise_if_cancelling()
                log.warning("partition %d: fetching command batches failed: %s", partition, exc)
                await asyncio.sleep(0.5)
                continue
            for msg in messages:
                await self._accept(partition, msg)

    def _bound(self) -> int:
        """Batches received and not yet settled above which no partition fetches more."""
        return self._concurrency * 4

    def _settled(self) -> None:
        """One outstanding batch was acked, dead-lettered or handed back: room for the fetches."""
        self._outstanding -= 1
        if self._outstanding < self._bound():
            self._room.set()

    async def _accept(self, partition: int, msg: Msg) -> None:
        try:
            batch = codec.decode_batch(msg.data)
        except Exception as exc:  # whatever the bytes make the decoder do, the message is parked
            await self._dead_letter(msg, f"malformed command batch: {type(exc).__name__}: {exc}")
            return
        deliveries = msg.metadata.num_delivered
        if self._max_deliver and deliveries > self._max_deliver:
            # A batch that keeps coming back (an applier died on it each time) must not block its key.
            reason = f"command batch {batch.id} delivered {deliveries} times without an ack"
            await self._dead_letter(msg, reason)
            await self._report(batch, None, reason)
            return
        self._outstanding += 1
        if msg.reply:
            self._unacked[id(msg)] = msg
        self._partition_of[batch.key] = partition
        self._queues.setdefault(batch.key, deque()).append((msg, batch))
        if batch.key not in self._workers:
            worker = asyncio.create_task(self._work(batch.key), name=f"applier {batch.key}")
            worker.add_done_callback(self._on_done)
            self._workers[batch.key] = worker

    def _holds(self, key: ReconcileKey) -> bool:
        """Whether ``key``'s partition is still this replica's and not stopping (a stopping partition has
        left ``_consumers``; its queued batches are handed back once its running ones finished)."""
        partition = self._partition_of.get(key)
        return partition is not None and partition in self._consumers

    async def _may_apply(self, key: ReconcileKey) -> bool:
        """Whether this replica may apply ``key``'s next batch: it holds the partition and its lease is
        valid. A lease that lapsed (this process was starved of CPU past its renewal) is waited for: the
        lease loop either renews it, or finds it taken and stops the partition, whose batches then go back
        to the stream. Never applied beside the partition's next holder (self-fencing)."""
        while self._holds(key):
            partition = self._partition_of[key]
            if self._leases is None or self._leases.valid(partition):
                return True
            await asyncio.sleep(FENCE_POLL)
        return False

    async def _work(self, key: ReconcileKey) -> None:
        queue = self._queues[key]
        try:
            while queue and self._holds(key):
                msg, batch = queue[0]
                async with self._slots:
                    if not await self._may_apply(key):
                        break
                    with self.progress.working():
                        failure = await self._apply_guarded(msg, batch)
                queue.popleft()
                self._settled()
                if failure is None:
                    with contextlib.suppress(nats.errors.Error):  # lost: redelivered, commands are idempotent
                        await msg.ack()
                    self.batches_applied += 1
                else:
                    await self._dead_letter(msg, failure)
                    await self._report(batch, None, failure)
                self._unacked.pop(id(msg), None)
        finally:
            self._workers.pop(key, None)
            if not queue:
                self._queues.pop(key, None)
                self._partition_of.pop(key, None)

    async def _apply_guarded(self, msg: Msg, batch: CommandBatch) -> str | None:
        """Apply ``batch``; the reason to dead-letter it when its handling raised (a bad message must not
        end its key's worker: later batches of the key still come)."""
        try:
            await self.apply_batch(msg, batch)
        except Exception as exc:
            log.exception("command batch %s of %s failed", batch.id, batch.key, extra={"raybus.key": str(batch.key)})
            return f"command batch {batch.id} failed: {type(exc).__name__}: {exc}"
        return None

    async def _report(self, batch: CommandBatch, command: Command | None, error: str) -> None:
        if self._on_failure is not None:
            await self._on_failure(batch, command, error)

    async def _dead_letter(self, msg: Msg, error: str) -> None:
        metadata = msg.metadata
        letter = dead_letter_of(msg, stream=subjects.COMMANDS_STREAM, error=error, at=self._clock())
        subject, msg_id = destination(letter)
        await self._publish_retrying(subject, codec.encode(letter), msg_id)
        self.dead_letters += 1
        log.warning("dead-lettered command message %d on %s: %s", metadata.sequence.stream, msg.subject, error)
        with contextlib.suppress(nats.errors.Error):  # lost: the message comes back and is parked again
            await msg.ack()

    # --- applying -------------------------------------------------------------------------------------

    async def apply_batch(self, msg: Msg, batch: CommandBatch) -> None:
        """Apply a batch's commands in order and publish a result for each (the caller acks).

        The results go out together (``reports``), also those of a run cut short by an error or a stop,
        and all of them are stored before this returns, as is the batch's revision (``freshness``)."""
        sequence = msg.metadata.sequence.stream if msg.reply else 0
        delivery = msg.metadata.num_delivered if msg.reply else 1
        subject = subjects.result_subject(batch.key)
        report = RunReport(
            lambda payload, msg_id: self._publish_retrying(subject, payload, msg_id),
            run_id(batch.id, batch_seq=sequence, delivery=delivery),
            together=self._result_batches,
        )
        parent = extract_context(msg.headers)
        checks = None
        if self._facts is not None:
            # A span of its own: the checks stand between the batch's delivery and its first call.
            with self._tracer.start_as_current_span(
                "applier.check_batch",
                context=parent,
                attributes={**key_attributes(batch.key), "raybus.commands": len(batch.commands)},
            ) as span:
                checks = BatchChecks(batch, self._facts, self._config, self._written.of(batch.key))
                checks.replay = await self._freshness.judge(
                    batch, verified=self._verified(batch, checks), holding=self._holding_of(batch.key)
                )
                if checks.replay:
                    span.set_attribute("raybus.replay", checks.replay)
        try:
            await self._apply_commands(msg, batch, report, checks, parent, sequence, delivery)
        finally:
            await asyncio.gather(report.close(), self._freshness.stored(batch.key))

    def _holding_of(self, key: ReconcileKey) -> int | None:
        """The id of this replica's holding of ``key``'s partition, while its lease is valid (else None)."""
        partition = self._partition_of.get(key)
        if partition is None or self._leases is None or not self._leases.valid(partition):
            return None
        consumer = self._consumers.get(partition)
        return consumer.holding if consumer is not None else None

    async def _verified(self, batch: CommandBatch, checks: BatchChecks) -> bool:
        """Whether ``batch`` counts as a decision applied (``freshness``): the facts reached its revision,
        and the checks do not refuse it whole."""
        caught_up = not batch.snapshot_revision or await self._facts_at(batch)
        return caught_up and not checks.refused_whole()

    async def _facts_at(self, batch: CommandBatch) -> bool:
        """Wait until the facts reflect the snapshot the batch was decided on (an applier reading them from
        KV may lag the reconciler that read it): older facts would deny what the decision saw. False when
        they did not get there in time (the batch is then judged on older ones)."""
        assert self._facts is not None
        try:
            await asyncio.wait_for(self._facts.caught_up(batch.snapshot_revision), FACTS_WAIT)
            return True
        except TimeoutError:
            raise_if_cancelling()
            log.warning(
                "the facts did not reach revision %d of batch %s within %.0fs; authorizing on older ones",
                batch.snapshot_revision,
                batch.id,
                FACTS_WAIT,
                extra={"raybus.key": str(batch.key)},
            )
            return False

    async def _apply_commands(
        self,
        msg: Msg,
        batch: CommandBatch,
        report: RunReport,
        checks: BatchChecks | None,
        parent: Context,
        sequence: int,
        delivery: int,
    ) -> None:
        queued = [later for m, later in self._queues.get(batch.key, ()) if m is not msg]
        # A late batch is no replay: every command is superseded, so the refusal below is never reached.
        review = await self._decisions.review(msg, batch, queued, behind=bool(checks and checks.replay))
        slots = asyncio.Semaphore(WAVE_CONCURRENCY)

        async def one(index: int, command: Command) -> None:
            async with slots:
                report.add(
                    await self._apply_one(batch, index, command, review.stale, checks, parent, sequence, delivery)
                )

        for wave in waves(batch.commands):
            if len(wave) == 1:
                await one(*wave[0])
            else:
                async with asyncio.TaskGroup() as group:  # one that raises cancels the rest of its wave
                    for index, command in wave:
                        group.create_task(one(index, command))

    async def _apply_one(
        self,
        batch: CommandBatch,
        index: int,
        command: Command,
        stale: Callable[[Command], str],
        checks: BatchChecks | None,
        parent: Context,
        sequence: int,
        delivery: int,
    ) -> CommandResult:
        """Apply one command inside its span; returns its result."""
        verb = command_verb(command)
        with self._tracer.start_as_current_span(
            f"applier.{verb}",
            context=parent,
            attributes={**key_attributes(batch.key), "raybus.verb": verb, "raybus.target": command_target(command)},
        ) as span:
            applied = await self._apply_authorized(batch, index, command, stale, checks, sequence)
            span.set_attribute("raybus.outcome", applied.outcome)
            if isinstance(command, PatchStatus) and applied.outcome in TAKEN_EFFECT:
                self._written.wrote(batch.key, command)
            pipeline_metrics.command_executed(verb, applied.outcome)
            if applied.status_code:
                span.set_attribute("http.response.status_code", applied.status_code)
            result = CommandResult(
                batch_id=batch.id,
                command_id=command.id or f"{batch.id}/{index}",
                key=batch.key,
                verb=verb,
                target=command_target(command),
                outcome=applied.outcome,
                at=self._clock(),
                error=applied.error,
                status_code=applied.status_code,
                resource_version=applied.resource_version,
                transitions=command.transitions
                if isinstance(command, PatchStatus) and applied.outcome == "applied"
                else (),
                trace_id=current_trace_id(),
                traceparent=current_traceparent(),
                batch_seq=sequence,
                delivery=delivery,
            )
        if applied.outcome == "failed":
            log.warning(
                "%s %s failed: %s",
                verb,
                command_target(command),
                applied.error,
                extra={"raybus.key": str(batch.key)},
            )
            await self._report(batch, command, applied.error)
        return result

    async def _apply_authorized(
        self,
        batch: CommandBatch,
        index: int,
        command: Command,
        stale: Callable[[Command], str],
        checks: BatchChecks | None,
        sequence: int = 0,
    ) -> Applied:
        """Apply one command if its key may (the one place commands are authorized), its decision still
        holds, and its batch and content are what the key's custom resource asks for now."""
        if checks is not None:
            verdict = checks.authority(index, command)
            if isinstance(verdict, Gone):
                return Applied(outcome=verdict.outcome, error=verdict.reason)
            if not isinstance(verdict, Allowed):
                await self._report_denial(batch, index, command, verdict.reason, sequence)
                return Applied(outcome="denied", error=verdict.reason[:1000])
        why = stale(command)
        if why:
            return Applied(outcome="superseded", error=why)
        reason = checks.refusal(index, command) if checks is not None else ""
        if reason:
            await self._report_denial(batch, index, command, reason, sequence)
            return Applied(outcome="denied", error=reason[:1000])
        return await self.apply_command(command)

    async def _report_denial(
        self, batch: CommandBatch, index: int, command: Command, reason: str, sequence: int = 0
    ) -> None:
        """Count, log, and show a denial on the key's custom resource (best effort: never raises). Each
        stored copy of a batch (``sequence``) gets its own Event: a republished one is shown again."""
        key, verb, target = batch.key, command_verb(command), command_target(command)
        self.denied += 1
        _denied.add(1, {"kind": command_kind(command), "verb": verb})
        log.warning("denied %s %s: %s", verb, target, reason, extra={"raybus.key": str(key)})
        assert self._facts is not None
        own = self._facts.find(key.kind, key.namespace, key.name)
        resource = by_kind(key.kind)
        if own is None or resource is None or self._api is None:
            return  # no custom resource to show it on (a made-up key): the log and the result carry it
        uid = (own.get("metadata") or {}).get("uid")
        regarding = ObjectRef(
            api_version=resource.api_version,
            kind=key.kind,
            namespace=key.namespace,
            name=key.name,
            uid=uid if isinstance(uid, str) else "",
        )
        event = EmitEvent(
            id=f"denied/{execution_id(batch, index, command, batch_seq=sequence)}",
            regarding=regarding,
            event_type="Warning",
            reason=DENIED_REASON,
            message=f"{verb} {target} was not executed: {reason}"[:1024],
        )
        await self._limiter.acquire()
        try:
            await self._api.aexecute(plan_call(event, now=self._clock()))
        except (ApiError, PermanentError) as exc:
            log.warning("could not record the denial on %s: %s", key, exc)

    async def apply_command(self, command: Command) -> Applied:
        """Apply one command; every failure becomes an outcome (only cancellation propagates)."""
        try:
            if isinstance(command, SubmitRayJob | StopRayJob | PutServeConfig):
                return await self._apply_dashboard(command)
            return await self._apply_api(command)
        except PermanentError as exc:
            return Applied(outcome="failed", error=str(exc))
        except Exception as exc:  # a command the calls cannot express (``body.metadata: 7``), or a bug
            log.warning("%s %s raised", command_verb(command), command_target(command), exc_info=True)
            return Applied(outcome="failed", error=f"{type(exc).__name__}: {exc}"[:1000])

    async def _apply_api(self, command: Command) -> Applied:
        if self._api is None:
            raise PermanentError("no Kubernetes API configured")
        api = self._api
        call = plan_call(command, now=self._clock(), generate=self._generate)

        async def send() -> Response:
            await self._limiter.acquire()
            return await api.aexecute(call)

        try:
            response = await retry(
                send,
                self._api_backoff,
                transient=is_transient,
                requested=requested_delay,
                on_retry=lambda exc, _, delay: log.info("%s: %s; retrying in %.1fs", call.path, exc, delay),
            )
        except ApiError as exc:
            outcome = outcome_of_error(call, exc) or "failed"
            return Applied(outcome=outcome, status_code=exc.status, error=str(exc)[:1000])
        resource_version = ""
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            resource_version = _head_decoder.decode(response.data).metadata.resourceVersion if response.data else ""
        return Applied(outcome="applied", status_code=response.status, resource_version=resource_version)

    async def _apply_dashboard(self, command: SubmitRayJob | StopRayJob | PutServeConfig) -> Applied:
        if self._dashboard is None:
            raise PermanentError("no dashboard client configured")
        result: DashboardOutcome = await self._dashboard.apply(command)
        applied = Applied(outcome=result.outcome, status_code=result.status_code, error=result.error)
        if isinstance(command, PutServeConfig) and command.record is not None and result.outcome != "failed":
            # The record says "the cluster has this config": written only once that is true.
            recorded = await self._apply_api(command.record)
            if recorded.outcome == "failed":
                error = f"the serve config was applied, recording it failed: {recorded.error}"
                return Applied(outcome="failed", status_code=recorded.status_code, error=error[:1000])
        return applied

    async def _publish_retrying(self, subject: str, payload: bytes, msg_id: str) -> None:
        await retry(
            lambda: publish(self._js, subject, payload, msg_id=msg_id),
            PUBLISH_BACKOFF,
            transient=bus_unavailable,
            on_retry=lambda exc, _, delay: log.warning(
                "publishing to %s failed (%s); retrying in %.2fs", subject, exc, delay
            ),
        )

    def queued(self) -> int:
        """Batches accepted and waiting behind their key's running one."""
        return sum(max(len(queue) - 1, 0) for queue in self._queues.values())

    @property
    def busy(self) -> int:
        """Batches received and not yet acked."""
        return self._outstanding

    def describe(self) -> dict[str, Any]:
        """Counters for health/metrics."""
        return {
            "batches_applied": self.batches_applied,
            "dead_letters": self.dead_letters,
            "denied": self.denied,
            "busy": self.busy,
        }
