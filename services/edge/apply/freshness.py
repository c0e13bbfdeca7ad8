"""Whether a command batch is a current decision or a replay: the one place decision revisions are compared.

Role: a decision is made on a snapshot of its key at a KV revision (``CommandBatch.snapshot_revision``).
Whoever may publish on the commands subjects can republish a captured, legitimate batch under a new
message id after the world moved on (a worker Pod deleted by a scale-down comes back). The applier
therefore applies a batch only if

- it is the newest decision of its key (``staleness``: a newer batch in the key's queue or on its subject
  supersedes it), and
- it was decided on a snapshot not older than the newest one this applier already applied for that key:
  a republished batch carries its old revision and is refused (``denied``, with the reason).

Only revisions the applier could verify are remembered: those its facts had reached (``caught_up``), so
a forged far-future revision cannot make every later decision of the key look old; and only of batches
not refused whole (``checks``), so a forged batch that changed nothing does not make the reconciler's
own decisions made just before it look old. Decisions of one key
are made one at a time, each on the key's entries read again before it, so a legitimate batch is not
older than one applied before it.
Failure reports (a batch of Warning Events after the key's inputs were dead-lettered) are no decision and
are not compared.
A legitimate batch can come after a newer decision of its key was applied: delivered again after the
applier that held it stopped. Its refusal here is then no replay: the newer decision is on the stream,
and the applier reports its commands superseded, not denied (``staleness``).

The newest revision applied per key is kept in KV ``raybus-applied`` (:meth:`Freshness.judge`), and
raised while a batch's commands run (:meth:`Freshness.stored` waits for the write before the batch is
acknowledged), so it survives a restart of the applier and is shared by its replicas: a batch replayed to
the next holder of its partition is refused there too. The entry only ever rises: each write names the
entry's KV revision it follows, and a write that finds the entry moved on reads it again and stands back
when it already holds as much (an applier whose lease lapsed cannot lower what the next holder wrote).
It is read before each batch, beside the applier's wait for its facts and its checks (the read is a
round trip on the path of every change), and not at all when this process wrote the key's entry itself
in its current holding of the key's partition: no other replica writes it meanwhile, and a new holding
reads again. The write is off the path of a change (two round trips were half of the time from a
decision to its first API call), and is stored before the batch is acknowledged, so no acknowledged batch
leaves a lower revision behind. Only the watcher's NATS user may write that bucket (a reconciler can
neither lower nor raise it). Each process also keeps it in memory, which answers alone while the bucket
cannot be read (a warning is logged). A reconciler worker reads the keys of a partition it takes whole
(``SnapshotReader.forget``), so it never decides on a revision older than one another worker already
decided on, even for a key whose entries did not change.

Known limits: an entry expires ``APPLIED_TTL`` after its key's last applied decision; a replay of a
key quiet for that long is refused only by a process that still remembers it. A reconciler that forges
a current revision is not a replay; what it may then do is bounded by ``authorize`` and ``provenance``.

Not here: the newest-decision check (``staleness``), the content of commands (``provenance``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Final

import nats.errors
from nats.js.errors import KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

from schema.keys import ReconcileKey
from schema.messages import CommandBatch, EmitEvent, PatchStatus
from schema.subjects import applied_key
from services.runtime.clock import Monotonic

log = logging.getLogger(__name__)

REMEMBERED_KEYS: Final = 200_000
"""Keys whose newest applied decision is remembered (the least recently applied ones are forgotten first)."""

STORE_ATTEMPTS: Final = 3
"""Writes of one revision, each after reading an entry that another replica changed meanwhile."""

WRITTEN_STANDS_FOR: Final = 3600.0
"""Seconds a revision this process wrote is taken to stand in the bucket without reading it again, while
the process holds the key's partition: far below ``APPLIED_TTL``, so an entry never expires unnoticed."""


class Freshness:
    """Per key, the newest verified snapshot revision applied; refuses batches decided before it.

    Args:
        remembered: keys kept in memory.
        floors: KV ``raybus-applied``, where the revisions are kept for every replica (None: memory only).
        clock: monotonic seconds, for how long a written revision stands (:data:`WRITTEN_STANDS_FOR`).
    """

    def __init__(
        self, *, remembered: int = REMEMBERED_KEYS, floors: KeyValue | None = None, clock: Monotonic = time.monotonic
    ) -> None:
        self._applied: OrderedDict[ReconcileKey, int] = OrderedDict()
        self._remembered = max(1, remembered)
        self._floors = floors
        self._clock = clock
        self._storing: dict[ReconcileKey, asyncio.Task[None]] = {}
        self._entries: OrderedDict[ReconcileKey, _Entry] = OrderedDict()
        """Per key, its entry in the bucket as this process last read or wrote it."""

    async def judge(self, batch: CommandBatch, *, verified: bool | Awaitable[bool], holding: int | None = None) -> str:
        """Why ``batch`` must not be applied ("" when it is a current decision). A current one is
        remembered as applied (``verified``: the facts reached its revision) at once, and written to the
        bucket in the background: :meth:`stored` waits for that write. An awaitable ``verified`` runs
        while the bucket is read: the read is a round trip on the path of every change.

        ``holding`` names the caller's uninterrupted holding of the key's partition (None: not known).
        No other replica writes the key's entry meanwhile, so under the holding in which this process
        last wrote it, that write is what the bucket holds, and it is not read again."""
        if _is_report(batch):
            await _known(verified)
            return ""
        reading = asyncio.ensure_future(self._stored_in_order(batch.key, holding))
        try:
            known = await _known(verified)
            stored = await reading
        finally:
            reading.cancel()  # a no-op once it is done
        if stored > self._applied.get(batch.key, 0):
            self._remember(batch.key, stored)
        replay = self.problem(batch)
        if replay:
            return replay
        if known and batch.snapshot_revision > stored:
            self._start_store(batch.key, batch.snapshot_revision, holding)
        self.applied(batch, verified=known)
        return ""

    async def stored(self, key: ReconcileKey) -> None:
        """Wait until the revision :meth:`judge` last accepted for ``key`` is written to the bucket (or
        failed to be, with a warning); the applier waits here before acknowledging the batch."""
        task = self._storing.get(key)
        if task is not None:
            await task

    def _start_store(self, key: ReconcileKey, revision: int, holding: int | None) -> None:
        task = asyncio.ensure_future(self._store(key, revision, holding))
        self._storing[key] = task

        def done(_: asyncio.Task[None]) -> None:
            if self._storing.get(key) is task:
                del self._storing[key]

        task.add_done_callback(done)

    async def _stored_in_order(self, key: ReconcileKey, holding: int | None) -> int:
        await self.stored(key)  # the key's previous write first: its writes stay in order
        seen = self._entries.get(key)
        if (
            holding is not None
            and seen is not None
            and seen.holding == holding
            and self._clock() - seen.at < WRITTEN_STANDS_FOR
        ):
            return seen.revision
        seen = await self._read(key)
        return seen.revision if seen is not None else 0

    async def _read(self, key: ReconcileKey) -> _Entry | None:
        """The key's entry as the bucket holds it now (remembered), or None when it cannot be read."""
        if self._floors is None:
            return None
        try:
            entry = await self._floors.get(applied_key(key))
        except NotFoundError as exc:  # never written or expired (no entry), or deleted (its tombstone's)
            gone = getattr(exc, "entry", None)
            return self._saw(key, 0, gone.revision if gone is not None else 0)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("the applied revision of %s cannot be read (%s); judging on this process's", key, exc)
            return None
        value = (entry.value or b"").decode(errors="replace")
        return self._saw(key, int(value) if value.isdigit() else 0, entry.revision or 0)

    async def _store(self, key: ReconcileKey, revision: int, holding: int | None) -> None:
        if self._floors is None:
            return
        # Until the write is answered, the bucket's value is not known.
        seen: _Entry | None = self._entries.pop(key, None)
        for _ in range(STORE_ATTEMPTS):
            try:
                sequence = await self._floors.update(
                    applied_key(key), str(revision).encode(), last=seen.sequence if seen is not None else 0
                )
            except KeyWrongLastSequenceError:  # written meanwhile: by a holder before this one, or after it
                seen = await self._read(key)
                if seen is None or seen.revision >= revision:
                    return
                continue
            except (nats.errors.Error, TimeoutError) as exc:
                log.warning("the applied revision %d of %s cannot be stored: %s", revision, key, exc)
                return
            self._saw(key, revision, sequence, holding)
            return
        log.warning("the applied revision %d of %s was not stored: the entry kept changing", revision, key)

    def _saw(self, key: ReconcileKey, revision: int, sequence: int, holding: int | None = None) -> _Entry:
        """Remember the key's entry as seen now."""
        self._entries.pop(key, None)
        self._entries[key] = entry = _Entry(revision, sequence, holding, self._clock())
        while len(self._entries) > self._remembered:
            self._entries.popitem(last=False)
        return entry

    def problem(self, batch: CommandBatch) -> str:
        """Why ``batch`` must not be applied, by this process's memory alone ("" when current)."""
        if _is_report(batch):
            return ""
        newest = self._applied.get(batch.key, 0)
        if batch.snapshot_revision < newest:
            return (
                f"a replayed decision: batch {batch.id} was decided on revision {batch.snapshot_revision}, "
                f"before revision {newest} of a decision of {batch.key} already applied"
            )
        return ""

    def applied(self, batch: CommandBatch, *, verified: bool) -> None:
        """Remember that ``batch`` is being applied; ``verified``: the facts reached its revision."""
        if not verified or _is_report(batch):
            return
        self._remember(batch.key, batch.snapshot_revision)

    def _remember(self, key: ReconcileKey, revision: int) -> None:
        newest = self._applied.pop(key, 0)
        self._applied[key] = max(newest, revision)
        while len(self._applied) > self._remembered:
            self._applied.popitem(last=False)

    def newest(self, key: ReconcileKey) -> int:
        """The newest verified revision applied for ``key`` (0: none remembered)."""
        return self._applied.get(key, 0)


@dataclass(frozen=True, slots=True)
class _Entry:
    """A key's entry in the bucket, as this process last saw it."""

    revision: int
    """The applied snapshot revision it holds (0: none)."""
    sequence: int
    """Its KV revision, which the next write must follow (0: the key has no entry)."""
    holding: int | None
    """The holding of the key's partition under which this process wrote it (None: read, not written)."""
    at: float
    """When this process saw it (monotonic seconds)."""


async def _known(verified: bool | Awaitable[bool]) -> bool:
    return verified if isinstance(verified, bool) else await verified


def _is_report(batch: CommandBatch) -> bool:
    return bool(batch.report) and all(isinstance(command, EmitEvent) for command in batch.commands)


WRITTEN_PER_KEY: Final = 4
"""Status patches remembered per key: a decision builds on the ones before it that its snapshot may not show."""


class WrittenStatus:
    """Per key, the last status patches this applier wrote.

    A decision is made on the key's snapshot plus the reconciler's own status writes still in flight (a
    RayJob's job id and dashboard URL, decided in the pass that creates its cluster), which the facts show
    only once the watch brings them back. The content checks read the custom resource with these folded in
    first, then the batch's own: raybus alone writes these statuses, in decision order, so the newest it
    wrote is what the next decision saw.
    """

    def __init__(self, *, remembered: int = REMEMBERED_KEYS) -> None:
        self._written: OrderedDict[ReconcileKey, deque[PatchStatus]] = OrderedDict()
        self._remembered = max(1, remembered)

    def wrote(self, key: ReconcileKey, patch: PatchStatus) -> None:
        """Remember that ``patch`` took effect for ``key``."""
        patches = self._written.pop(key, None) or deque(maxlen=WRITTEN_PER_KEY)
        patches.append(patch)
        self._written[key] = patches
        while len(self._written) > self._remembered:
            self._written.popitem(last=False)

    def of(self, key: ReconcileKey) -> tuple[PatchStatus, ...]:
        """The status patches written for ``key``, oldest first."""
        return tuple(self._written.get(key, ()))
