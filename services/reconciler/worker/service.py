"""``raybus reconciler``: a stateless worker holding a share of the event partitions.

It needs NATS only — no Kubernetes credentials (invariant 6). On SIGTERM it stops claiming, lets each
partition finish the batch in hand (bounded by ``exit_timeout``), releases its leases so the others take
over at once, and closes. A consumer that crashes stops the whole worker (and its supervisor restarts
it): a partition never silently stops being processed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Mapping

from nats.aio.client import Client
from nats.js.kv import KeyValue

from schema import subjects
from schema.decision import ReconcileFn
from schema.keys import KeyKind, ReconcileKey
from schema.parts import part_budget
from services.reconciler.registry import default_reconcilers
from services.reconciler.worker.applied import AppliedFloor
from services.reconciler.worker.consumer import DECIDING_AT_ONCE, PartitionConsumer
from services.reconciler.worker.handover import recent_batches
from services.reconciler.worker.inflight import InFlight
from services.reconciler.worker.results import follow_results
from services.reconciler.worker.stalls import StallWatch
from services.reconciler.worker.timers import TimerScheduler
from services.replay.responder import serve_replays
from services.runtime.aio import cancel_and_wait
from services.runtime.bus import connect
from services.runtime.fetching import Linger
from services.runtime.health import HealthServer, Progress
from services.runtime.leases import Membership, PartitionLeases, default_member_id
from services.runtime.publishing import AckedJetStream
from services.runtime.settings import RaybusSettings
from services.runtime.snapshots import SnapshotReader
from services.runtime.topology import ensure_topology, open_leases, when_answered

log = logging.getLogger(__name__)


async def run_reconciler(
    settings: RaybusSettings,
    stop: asyncio.Event,
    health: HealthServer,
    *,
    reconcilers: Mapping[KeyKind, ReconcileFn] | None = None,
) -> None:
    """Run one worker until ``stop`` is set.

    Raises:
        RuntimeError: a partition consumer crashed (after the others were drained).
    """
    worker_id = settings.partitions.worker_id or default_member_id()
    nc = await connect(settings.nats, name=f"raybus-reconciler-{worker_id}")
    try:
        lease_bucket = await _lease_bucket(nc, settings)
        kinds = dict(reconcilers if reconcilers is not None else default_reconcilers())
        worker = _Worker(nc, settings, stop, kinds)
        await worker.run(worker_id, lease_bucket, health)
    finally:
        with contextlib.suppress(Exception):
            await nc.drain()


async def _lease_bucket(nc: Client, settings: RaybusSettings) -> KeyValue:
    """The partition leases' bucket; first the whole topology when this process sees to it."""
    if settings.nats.ensure_topology:
        buckets = await when_answered(
            lambda: ensure_topology(nc, bus=settings.bus, partitions=settings.partitions), "reconciler"
        )
        return buckets.leases
    return await when_answered(lambda: open_leases(nc, bus=settings.bus, partitions=settings.partitions), "reconciler")


class _Worker:
    """The partitions one reconciler holds: a consumer each, started and stopped as their leases come and go."""

    def __init__(
        self, nc: Client, settings: RaybusSettings, stop: asyncio.Event, kinds: dict[KeyKind, ReconcileFn]
    ) -> None:
        self._nc = nc
        self._settings = settings
        self._stop = stop
        self._kinds = kinds
        self._js = AckedJetStream(nc)
        self._reader = SnapshotReader(nc)
        self._timers = TimerScheduler(self._js)
        self._applied = AppliedFloor(self._js)
        self._running: dict[int, tuple[PartitionConsumer, asyncio.Task[None]]] = {}
        self._crashed: list[BaseException] = []
        self._progress = Progress("reconcile")
        self._deciding = asyncio.Semaphore(DECIDING_AT_ONCE)  # the bound is the worker's, over its partitions
        self._leases: PartitionLeases | None = None

    async def run(self, worker_id: str, lease_bucket: KeyValue, health: HealthServer) -> None:
        """Hold partitions until ``stop``; raise if a consumer crashed."""
        settings = self._settings
        membership = Membership(
            self._nc,
            lease_bucket,
            worker_id,
            settings.bus.partitions,
            settings.partitions,
            connect=functools.partial(connect, settings.nats, name=f"raybus-reconciler-{worker_id}-leases"),
        )
        self._leases = PartitionLeases(membership, "reconcile", start=self._start, stop=self._stop_partition)
        health.add_readiness("nats", lambda: None if self._nc.is_connected else "not connected to NATS")
        health.add_readiness("progress", self._progress.stalled)
        await serve_replays(self._nc, config=settings.operator, reconcilers=self._kinds)
        await follow_results(self._nc, self._memory_of)
        log.info("reconciler %s running with kinds %s", worker_id, ", ".join(sorted(self._kinds)))
        watching = None
        if settings.partitions.stall_after > 0:
            stalls = StallWatch(
                self._nc, partitions=settings.bus.partitions, stall_after=settings.partitions.stall_after
            )
            watching = asyncio.create_task(stalls.run(self._stop), name="stall-watch")
        try:
            await self._leases.run(self._stop)
        finally:
            if watching is not None:
                await cancel_and_wait([watching], timeout=5.0)
            await self._applied.close()
        if self._crashed:
            raise RuntimeError(f"a partition consumer crashed: {self._crashed[0]!r}") from self._crashed[0]

    def _lease_valid(self, partition: int) -> bool:
        return self._leases is not None and self._leases.valid(partition)

    def _consumer(self, partition: int) -> PartitionConsumer:
        settings = self._settings
        return PartitionConsumer(
            partition,
            nc=self._nc,
            js=self._js,
            reader=self._reader,
            timers=self._timers,
            reconcilers=self._kinds,
            config=settings.operator,
            bus=settings.bus,
            lease_valid=functools.partial(self._lease_valid, partition),
            inflight=InFlight(
                grace=settings.partitions.inflight_grace,
                max_age=settings.partitions.inflight_max_age,
                create_hold=settings.partitions.inflight_create_hold,
            ),
            applied=self._applied,
            linger=Linger(settings.partitions.coalesce_window, settings.partitions.coalesce_window_max),
            progress=self._progress,
            part_budget=part_budget(self._nc.max_payload),
            recall=lambda key: recent_batches(self._nc, key, within=settings.partitions.inflight_max_age),
            resync_period=settings.partitions.resync_period,
            deciding=self._deciding,
        )

    async def _start(self, partition: int) -> None:
        """Take a partition: its keys are read whole again (what this worker held of them may be old)."""
        partitions = self._settings.bus.partitions
        self._reader.forget(lambda key: subjects.partition_of(key, partitions) == partition)
        consumer = self._consumer(partition)
        task = asyncio.create_task(consumer.run(), name=f"partition-{partition}")
        task.add_done_callback(self._on_done)
        self._running[partition] = (consumer, task)

    def _on_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._crashed.append(task.exception())  # type: ignore[arg-type]
            self._stop.set()

    def _memory_of(self, key: ReconcileKey) -> InFlight | None:
        held = self._running.get(subjects.partition_of(key, self._settings.bus.partitions))
        return held[0].inflight if held is not None else None

    async def _stop_partition(self, partition: int) -> None:
        """Let a partition finish the batch in hand, within ``exit_timeout``, then cancel it."""
        consumer, task = self._running.pop(partition)
        consumer.request_stop()
        timeout = self._settings.partitions.exit_timeout
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            log.warning("partition %d did not drain within %.0fs; cancelling", partition, timeout)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        except Exception:
            pass  # already recorded by _on_done
