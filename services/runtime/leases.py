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
from services.runtime.ownloop import OwnLoop
from services.runtime.settings import PartitionSettings

log = logging.getLogger(__name__)

PartitionCallback = Callable[[int], Awaitable[None]]
Connect = Callable[[], Awaitable[Client]]
"""Opens a NATS connection of the member's own (credentials as the process's main one)."""


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
        """Partitions whose lease the renewal found expired or taken; stopped by the next round."""
        self._renewer: OwnLoop[None] | None = None
        self.members: frozenset[str] = frozenset()

    @property
    def owned(self) -> frozenset[int]:
        """Partitions this member currently holds."""
        with self._lock:
            return frozenset(self._revisions)

    def valid(self, partition: int) -> bool:
        """Whether this member may still process ``partition`` (self-fencing)."""
        with self._lock:
            until = self._valid_until.get(partition, 0.0)
        return time.monotonic() < until

    async def run(self, stop: asyncio.Event) -> None:
        """Keep leases in step with membership until ``stop``; then release everything."""
        if self._connect is not None:
            self._renewer = OwnLoop(self._keep_renewed, name=f"{self._group}-leases")
        try:
            while not stop.is_set():
                try:
                    await self.tick()
                except (NatsError, RetryableError) as exc:
                    # NATS unreachable: partitions fence themselves when their leases lapse; the next
                    # round renews or re-claims them.
                    log.warning("lease round failed (%s); retrying", exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._settings.renew_interval)
        finally:
            await self.release_all()

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
        await self._release_many(self.owned - wanted)
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
            kv = await nc.jetstream().key_value(subjects.LEASES_BUCKET)
            while not stop.is_set():
                try:
                    await self.renew(kv)
                except Exception as exc:
                    if not bus_unavailable(exc) and not isinstance(exc, RetryableError):
                        raise
                    log.warning("%s: renewing failed (%s); retrying", self._group, exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._settings.renew_interval)
        finally:
            with contextlib.suppress(Exception):
                await nc.close()

    async def release_all(self) -> None:
        """Drain and release every held partition, then stop renewing and heartbeating (shutdown)."""
        try:
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
            self._valid_until[partition] = self._deadline(sent)
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
            # Expired or taken. Even a lease that expired unclaimed is not simply taken again: another
            # member may have held the partition meanwhile and released it, and only a restarted
            # partition rebuilds the in-flight memory of what that member published.
            with self._lock:
                if self._revisions.get(partition) != revision or partition in self._releasing:
                    return  # released or re-claimed meanwhile: not this renewal's to judge
                self._valid_until.pop(partition, None)
                self._lost.add(partition)
            log.warning("%s: lost the lease of partition %d; stopping it", self._group, partition)
            return
        with self._lock:
            if self._revisions.get(partition) != revision:
                return
            self._revisions[partition] = renewed  # also while draining: the release deletes this revision
            if partition not in self._releasing:
                self._valid_until[partition] = self._deadline(sent)

    async def _stop_lost(self) -> None:
        with self._lock:
            lost, self._lost = self._lost, set()
        for partition in sorted(lost):
            await self._stop(partition)
            with self._lock:
                self._revisions.pop(partition, None)

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
            self._valid_until.pop(partition, None)
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
        log.info("%s: released partition %d", self._group, partition)

    def _deadline(self, sent: float) -> float:
        """Until when a lease written by a request sent at ``sent`` may be used: the server's TTL runs from
        its write, which is after the send, never from when this process saw the answer."""
        return sent + self._settings.lease_ttl - self._settings.renew_interval
