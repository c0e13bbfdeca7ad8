"""Partition ownership leased in JetStream KV ``raybus-leases`` (docs/architecture.md#invariants, invariant 2).

Every stage that works per reconcile key and scales out shares the partitions among its replicas this
way: the reconcilers, the appliers and the probers, each a separate group (``subjects.LeaseGroup``), so a
key is reconciled by one reconciler, applied by one applier and probed by one prober at a time.

Each member heartbeats ``<group>.w.<id>`` and computes the assignment from the group's live members
(``assignment.py``). It claims a partition it should own with a KV *create* (fails while another member
holds it), renews with a compare-and-set *update*, and releases with a compare-and-set *delete* after
its partition has drained. The bucket's TTL expires a dead member's leases and heartbeat. A member also
fences itself: it stops processing a partition when it has not renewed within ``lease_ttl -
renew_interval``, before the KV entry can expire and another member claim it, so two members of a group
never process one key at once.

Renewals and heartbeats run on a thread of their own, with their own event loop and NATS connection
(``Membership.connect``, ``ownloop.py``), so a process whose event loop is busy with work (or throttled by
a tight CPU quota) still renews in time: on a shared loop a renewal waited behind every reconcile and
apply ready to run, and under a 10 %-of-a-core quota leases lapsed again and again and their partitions
moved for nothing. Claims, releases and the start and stop of partitions stay on the caller's loop; the two sides
share the lease state under one lock that is never held across an ``await``.

Lost leases (the bucket's TTL ran out while NATS did not answer, e.g. during a JetStream leader election)
are stopped all at once, each on a task of its own, and the round waits for them at most one
``renew_interval``: every partition whose stop is over is claimed again at once, one still draining later
(the renewal thread wakes the round the moment it finds a lease lost, and each finished stop wakes it
again). Stopping them one after another made a member that lost 16 partitions hold none for minutes, as
each drain waited for its batch in hand. The longest time a group held no valid lease is logged and kept
as ``raybus_lease_gap_seconds``.

Rejected: a single coordinator assigning partitions (a SPOF and a second protocol); JetStream
consumer groups (not in JetStream; pinned-client priority groups give failover but not balancing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from schema import subjects
from schema.keys import decode_token
from services.runtime.assignment import partitions_of
from services.runtime.bus import bus_unavailable
from services.runtime.errors import RetryableError
from services.runtime.kvread import read_latest
from services.runtime.metrics import meter
from services.runtime.ownloop import OwnLoop
from services.runtime.settings import PartitionSettings

log = logging.getLogger(__name__)
_gaps = meter(__name__).create_histogram(
    "raybus_lease_gap_seconds",
    unit="s",
    description="time a member held no valid partition lease before it held one again, by lease group",
)

RETRY_FRACTION: Final = 0.25
"""After a failed renewal the next one is sent after this fraction of ``renew_interval``: the leases are
renewed within moments of a JetStream leader election's end, not an interval later."""

PartitionCallback = Callable[[int], Awaitable[None]]
Connect = Callable[[], Awaitable[Client]]
"""Opens a NATS connection of the member's own (credentials as the process's main one)."""


async def first_of(*events: asyncio.Event, timeout: float) -> None:
    """Return once any of ``events`` is set, or after ``timeout`` seconds."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


def default_member_id() -> str:
    """Hostname and pid: unique per process, stable for its life."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class Membership:
    """Where and as whom a replica takes part in sharing the partitions."""

    nc: Client
    kv: KeyValue
    """The leases bucket."""
    member_id: str
    """Unique per process and stable for its life (hostname and pid by default)."""
    partitions: int
    settings: PartitionSettings
    connect: Connect | None = None
    """Opens the renewal thread's connection; None renews on the caller's loop, in :meth:`PartitionLeases.tick`."""


class PartitionLeases:
    """Claims, renews and releases this member's partitions in one group; starts and stops them."""

    def __init__(
        self,
        membership: Membership,
        group: subjects.LeaseGroup,
        *,
        start: PartitionCallback,
        stop: PartitionCallback,
    ) -> None:
        self._nc = membership.nc
        self._kv = membership.kv
        self._me = membership.member_id
        self._group = group
        self._partitions = membership.partitions
        self._settings = membership.settings
        self._start = start
        self._stop = stop
        self._connect = membership.connect
        self._lock = threading.Lock()
        """Guards the lease state below between the caller's loop and the renewal thread."""
        self._revisions: dict[int, int] = {}
        self._valid_until: dict[int, float] = {}
        self._releasing: set[int] = set()
        """Partitions being drained for release: their leases are kept, no longer counted valid."""
        self._lost: set[int] = set()
        """Partitions whose lease the renewal found expired or taken, until their stop is over."""
        self._stopping: dict[int, asyncio.Task[None]] = {}
        """Lost partitions being stopped; claimable again once their stop is over."""
        self._wake = asyncio.Event()
        """Set when a round should run now: a lease was found lost, or a lost partition's stop ended."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._covered_until = 0.0
        """Monotonic time up to which some partition was valid (0: never held one)."""
        self.longest_gap = 0.0
        """Longest time, in seconds, this member held no valid lease between holding some."""
        self._ttl = membership.settings.lease_ttl
        """Seconds a lease entry lives: the configured TTL, or the bucket's when that is shorter."""
        self._renewer: OwnLoop[None] | None = None
        self.members: frozenset[str] = frozenset()

    @property
    def owned(self) -> frozenset[int]:
        """Partitions this member currently holds."""
        with self._lock:
            return frozenset(self._revisions)

    @property
    def ttl(self) -> float:
        """Seconds a lease entry lives: the configured TTL, or the bucket's when that is shorter."""
        return self._ttl

    def valid(self, partition: int) -> bool:
        """Whether this member may still process ``partition`` (self-fencing)."""
        with self._lock:
            until = self._valid_until.get(partition, 0.0)
        return time.monotonic() < until

    def lost(self, partition: int) -> bool:
        """Whether ``partition``'s lease was found expired or taken and its stop is not over: another member
        may hold it already, so its stop must not wait for work in hand."""
        with self._lock:
            return partition in self._lost

    async def run(self, stop: asyncio.Event) -> None:
        """Keep leases in step with membership until ``stop``; then release everything."""
        self._loop = asyncio.get_running_loop()
        await self._check_bucket_ttl()
        if self._connect is not None:
            self._renewer = OwnLoop(self._keep_renewed, name=f"{self._group}-leases")
        try:
            while not stop.is_set():
                self._wake.clear()
                try:
                    await self.tick()
                except (NatsError, RetryableError) as exc:
                    # NATS unreachable: partitions fence themselves when their leases lapse; the next
                    # round renews or re-claims them.
                    log.warning("lease round failed (%s); retrying", exc)
                await first_of(stop, self._wake, timeout=self._settings.renew_interval)
        finally:
            await self.release_all()

    async def _check_bucket_ttl(self) -> None:
        """Fence by the bucket's TTL when it is shorter than the configured one (a bucket created with an
        older default, before ``raybus topology`` updated it): fencing later than the entry expires would
        let another member claim a partition this one still processes."""
        try:
            bucket_ttl = (await self._kv.status()).ttl
        except NatsError as exc:
            log.warning(
                "%s: reading the leases bucket's TTL failed (%s); assuming the configured one", self._group, exc
            )
            return
        if bucket_ttl and bucket_ttl < self._ttl:
            log.warning(
                "%s: the leases bucket expires entries after %.1fs, before the configured %.1fs; fencing by its TTL",
                self._group,
                bucket_ttl,
                self._ttl,
            )
            self._ttl = bucket_ttl

    async def tick(self) -> None:
        """One round: renew (unless the renewal thread does), stop the partitions whose lease was lost,
        recompute the assignment, release, claim.

        Raises:
            RuntimeError: the renewal thread ended; without it the leases would lapse unseen.
        """
        if self._renewer is None:
            await self.renew(self._kv)
        elif not self._renewer.alive:
            raise RuntimeError(f"{self._group}: the lease renewal thread ended")
        await self._stop_lost()
        self.members = await self._live_members()
        wanted = partitions_of(self._me, self.members, self._partitions)
        await self._release_many(self.owned - wanted - set(self._stopping))
        for partition in sorted(wanted - self.owned):
            await self._claim(partition)

    async def renew(self, kv: KeyValue) -> None:
        """Renew every held lease (all at once: every sequential round trip would wait for the loop again)
        and this member's heartbeat, through ``kv`` (the caller's or the renewal thread's)."""
        with self._lock:
            skipped = self._releasing | self._lost
            held = {p: r for p, r in self._revisions.items() if p not in skipped}
        await asyncio.gather(*(self._renew(kv, p, r) for p, r in sorted(held.items())))
        await kv.put(subjects.heartbeat_key(self._group, self._me), self._me.encode())

    async def _keep_renewed(self, stop: asyncio.Event) -> None:
        """The renewal thread's body: renew every ``renew_interval`` on a NATS connection of its own."""
        assert self._connect is not None
        nc = await self._connect()
        try:
            # A renewal that waits longer than one interval for its answer (its request went to a node
            # that just died) is given up and sent again, through whichever node answers now.
            interval = self._settings.renew_interval
            kv = await nc.jetstream(timeout=interval).key_value(subjects.LEASES_BUCKET)
            while not stop.is_set():
                pause = interval
                try:
                    await self.renew(kv)
                except Exception as exc:
                    if not bus_unavailable(exc) and not isinstance(exc, RetryableError):
                        raise
                    log.warning("%s: renewing failed (%s); retrying", self._group, exc)
                    pause = interval * RETRY_FRACTION  # the bus may answer again any moment (a new leader)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)
        finally:
            with contextlib.suppress(Exception):
                await nc.close()

    async def release_all(self) -> None:
        """Drain and release every held partition, then stop renewing and heartbeating (shutdown)."""
        try:
            stopping, self._stopping = list(self._stopping.values()), {}
            for failed in await asyncio.gather(*stopping, return_exceptions=True):
                if isinstance(failed, Exception):
                    log.warning("%s: stopping a lost partition failed: %r", self._group, failed)
            await self._release_many(self.owned)  # the renewal thread keeps the leases while they drain
        finally:
            if self._renewer is not None:
                await self._renewer.close()
            with contextlib.suppress(Exception):
                await self._kv.delete(subjects.heartbeat_key(self._group, self._me))

    async def _live_members(self) -> frozenset[str]:
        read = await read_latest(self._nc, subjects.LEASES_BUCKET, subjects.heartbeats_filter(self._group))
        return frozenset(decode_token(k.split(".", 2)[2]) for k in read.values) | {self._me}

    async def _claim(self, partition: int) -> None:
        key = subjects.lease_key(self._group, partition)
        sent = time.monotonic()
        revision = await self._create(key)
        if revision is None:
            revision = await self._reclaim_own(key)
        if revision is None:
            return  # held by another member: it releases once it sees the new membership
        with self._lock:
            self._revisions[partition] = revision
            self._set_validity(partition, self._deadline(sent))
        log.info("%s: claimed partition %d", self._group, partition)
        await self._start(partition)

    async def _reclaim_own(self, key: str) -> int | None:
        """A lease that still names this member (a restart with the same id) is taken back."""
        revision = await self._own_revision(key)
        if revision is None:
            return None
        try:
            return await self._kv.update(key, self._me.encode(), last=revision)
        except KeyWrongLastSequenceError:
            return None

    async def _own_revision(self, key: str) -> int | None:
        """The revision of lease ``key`` when it names this member, else None."""
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        if entry.value != self._me.encode() or entry.revision is None:
            return None
        return entry.revision

    async def _renew(self, kv: KeyValue, partition: int, revision: int) -> None:
        key = subjects.lease_key(self._group, partition)
        sent = time.monotonic()
        try:
            renewed = await kv.update(key, self._me.encode(), last=revision)
        except (KeyWrongLastSequenceError, KeyNotFoundError):
            # A renewal whose answer was given up on (a slow answer during a leader election) may still
            # have been written: a lease that names this member is still its own.
            sent = time.monotonic()
            adopted = await self._renew_own(kv, key)
            if adopted is None:
                self._mark_lost(partition, revision)
                return
            renewed = adopted
        with self._lock:
            if self._revisions.get(partition) != revision:
                return
            self._revisions[partition] = renewed  # also while draining: the release deletes this revision
            if partition not in self._releasing:
                self._set_validity(partition, self._deadline(sent))

    async def _renew_own(self, kv: KeyValue, key: str) -> int | None:
        """Renew lease ``key`` at its current revision if it names this member; None when it does not."""
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:
            return None
        if entry.value != self._me.encode() or entry.revision is None:
            return None
        try:
            return await kv.update(key, self._me.encode(), last=entry.revision)
        except (KeyWrongLastSequenceError, KeyNotFoundError):
            return None

    def _mark_lost(self, partition: int, revision: int) -> None:
        """Expired or taken. Even a lease that expired unclaimed is not simply taken again: another member
        may have held the partition meanwhile and released it, and only a restarted partition rebuilds the
        in-flight memory of what that member published. It stays in ``_lost`` until its stop is over, so
        no renewal tries it again meanwhile."""
        with self._lock:
            stale = self._revisions.get(partition) != revision
            if stale or partition in self._releasing or partition in self._lost:
                return  # released, re-claimed or already found lost: not this renewal's to judge
            self._drop_validity(partition)
            self._lost.add(partition)
        log.warning("%s: lost the lease of partition %d; stopping it", self._group, partition)
        self._wake_round()

    def _wake_round(self) -> None:
        """Have the lease loop run a round now (from the renewal thread or the caller's loop)."""
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: nothing is left to wake
            if loop is asyncio.get_running_loop():
                self._wake.set()
                return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._wake.set)

    async def _stop_lost(self) -> None:
        """Stop every newly lost partition at once, waiting for their stops at most one renewal interval
        (a partition still draining is claimed again by a later round, which its stop's end wakes).

        Raises:
            Exception: what a finished stop raised (a crashed partition).
        """
        with self._lock:
            lost = self._lost - self._releasing  # a partition being released is stopped by its release
        started = []
        for partition in sorted(lost - set(self._stopping)):
            task = asyncio.create_task(self._stop_one_lost(partition), name=f"{self._group}-stop-{partition}")
            task.add_done_callback(lambda _: self._wake_round())
            self._stopping[partition] = task
            started.append(task)
        if started:
            await asyncio.wait(started, timeout=self._settings.renew_interval)
        for partition, task in list(self._stopping.items()):
            if task.done():
                del self._stopping[partition]
                task.result()

    async def _stop_one_lost(self, partition: int) -> None:
        try:
            await self._stop(partition)
        finally:
            with self._lock:
                self._revisions.pop(partition, None)
                self._valid_until.pop(partition, None)
                self._lost.discard(partition)

    async def _create(self, key: str) -> int | None:
        """Create the lease ``key`` for this member; None when another member holds it."""
        try:
            return await self._kv.create(key, self._me.encode())
        except KeyWrongLastSequenceError:
            return None

    async def _release_many(self, partitions: frozenset[int]) -> None:
        """Drain partitions concurrently (each finishes its batch in hand), then release them."""
        await asyncio.gather(*(self._release(p) for p in sorted(partitions)))

    async def _release(self, partition: int) -> None:
        with self._lock:
            self._releasing.add(partition)
            self._drop_validity(partition)
        try:
            await self._stop(partition)
            key = subjects.lease_key(self._group, partition)
            with self._lock:
                revision = self._revisions[partition]
            try:
                await self._kv.delete(key, last=revision)
            except KeyWrongLastSequenceError:
                # A renewal sent before the drain began landed after it was read: delete what names us.
                if (current := await self._own_revision(key)) is not None:
                    await self._kv.delete(key, last=current)
        except NatsError as exc:
            # Already expired or taken over: either way it is no longer ours, which is the goal.
            log.info("%s: lease of partition %d was already gone: %s", self._group, partition, exc)
        finally:
            with self._lock:
                self._revisions.pop(partition, None)
                self._releasing.discard(partition)
                self._lost.discard(partition)
        log.info("%s: released partition %d", self._group, partition)

    def _set_validity(self, partition: int, until: float) -> None:
        """Record that ``partition`` may be processed until ``until``; a member that held no valid lease
        until now logs and measures how long it went without (caller holds the lock)."""
        now = time.monotonic()
        if self._covered_until and now > self._covered_until:
            gap = now - self._covered_until
            self.longest_gap = max(self.longest_gap, gap)
            _gaps.record(gap, {"group": self._group})
            log.info(
                "%s: holding a partition again after %.1fs without any",
                self._group,
                gap,
                extra={"gap_s": gap, "lease_group": self._group},
            )
        self._valid_until[partition] = until
        self._covered_until = max(self._covered_until, until)

    def _drop_validity(self, partition: int) -> None:
        """``partition`` may no longer be processed from now on (caller holds the lock)."""
        until = self._valid_until.pop(partition, None)
        if until is None:
            return
        rest = max(self._valid_until.values(), default=0.0)
        self._covered_until = max(rest, min(until, time.monotonic()))

    def _deadline(self, sent: float) -> float:
        """Until when a lease written by a request sent at ``sent`` may be used: the server's TTL runs from
        its write, which is after the send, never from when this process saw the answer."""
        return sent + self._ttl - self._settings.renew_interval
