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
        if settings.nats.ensure_topology:
            buckets = await when_answered(
                lambda: ensure_topology(nc, bus=settings.bus, partitions=settings.partitions), "reconciler"
            )
            lease_bucket = buckets.leases
        else:
            lease_bucket = await when_answered(
                lambda: open_leases(nc, bus=settings.bus, partitions=settings.partitions), "reconciler"
            )
        js = nc.jetstream()
        reader = SnapshotReader(nc)
        timers = TimerScheduler(js)
        applied = AppliedFloor(js)
        kinds = dict(reconcilers if reconcilers is not None else default_reconcilers())
        running: dict[int, tuple[PartitionConsumer, asyncio.Task[None]]] = {}
        crashed: list[BaseException] = []
        progress = Progress("reconcile")
        deciding = asyncio.Semaphore(DECIDING_AT_ONCE)  # shared: the bound is the worker's, over its partitions
        leases: PartitionLeases

        def on_done(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                crashed.append(task.exception())  # type: ignore[arg-type]
                stop.set()

        async def start(partition: int) -> None:
            reader.forget(lambda key: subjects.partition_of(key, settings.bus.partitions) == partition)
            consumer = PartitionConsumer(
                partition,
                js=js,
                reader=reader,
                timers=timers,
                reconcilers=kinds,
                config=settings.operator,
                bus=settings.bus,
                lease_valid=lambda: leases.valid(partition),
                inflight=InFlight(
                    grace=settings.partitions.inflight_grace,
                    max_age=settings.partitions.inflight_max_age,
                    create_hold=settings.partitions.inflight_create_hold,
                ),
                applied=applied,
                linger=Linger(settings.partitions.coalesce_window, settings.partitions.coalesce_window_max),
                progress=progress,
                part_budget=part_budget(nc.max_payload),
                recall=lambda key: recent_batches(nc, key, within=settings.partitions.inflight_max_age),
                resync_period=settings.partitions.resync_period,
                deciding=deciding,
            )
            task = asyncio.create_task(consumer.run(), name=f"partition-{partition}")
            task.add_done_callback(on_done)
            running[partition] = (consumer, task)

        def memory_of(key: ReconcileKey) -> InFlight | None:
            held = running.get(subjects.partition_of(key, settings.bus.partitions))
            return held[0].inflight if held is not None else None

        async def stop_partition(partition: int) -> None:
            consumer, task = running.pop(partition)
            consumer.request_stop()
            try:
                await asyncio.wait_for(asyncio.shield(task), settings.partitions.exit_timeout)
            except TimeoutError:
                log.warning(
                    "partition %d did not drain within %.0fs; cancelling", partition, settings.partitions.exit_timeout
                )
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            except Exception:
                pass  # already recorded by on_done

        membership = Membership(
            nc,
            lease_bucket,
            worker_id,
            settings.bus.partitions,
            settings.partitions,
            connect=functools.partial(connect, settings.nats, name=f"raybus-reconciler-{worker_id}-leases"),
        )
        leases = PartitionLeases(membership, "reconcile", start=start, stop=stop_partition)
        health.add_readiness("nats", lambda: None if nc.is_connected else "not connected to NATS")
        health.add_readiness("progress", progress.stalled)
        await serve_replays(nc, config=settings.operator, reconcilers=kinds)
        await follow_results(nc, memory_of)
        log.info("reconciler %s running with kinds %s", worker_id, ", ".join(sorted(kinds)))
        watching = None
        if settings.partitions.stall_after > 0:
            stalls = StallWatch(nc, partitions=settings.bus.partitions, stall_after=settings.partitions.stall_after)
            watching = asyncio.create_task(stalls.run(stop), name="stall-watch")
        try:
            await leases.run(stop)
        finally:
            if watching is not None:
                await cancel_and_wait([watching], timeout=5.0)
        if crashed:
            raise RuntimeError(f"a partition consumer crashed: {crashed[0]!r}") from crashed[0]
    finally:
        with contextlib.suppress(Exception):
            await nc.drain()
