"""Reading one reconcile key's snapshot from KV ``raybus-objects``.

The read (``kvread.KvReader.entries``) returns every entry under the key's prefix and the KV revision it
reflects (``bench/snapshot_bench.py`` measures what a read costs both sides). If a replica answers
with a revision older than the event being processed, the read is retried (the leader has it). A
prefix never written answers "no results"; deletes leave markers, so then nothing can be missing.

A large key is read whole only now and then. A RayCluster of 5,000 workers has 5,000 Pod entries of
some 6 KB: reading and decoding all of them took about half a second, for every one of the ~130
decisions of a 1 → 5,000 scale-up, while a decision's inputs changed a few dozen. So the reader holds
the decoded entries of the keys with at least :data:`HELD_FROM` entries (at most :data:`HELD_ENTRIES`
entries over all keys, the least recently read key dropped first) and reads only what was written
under the key after the revision it holds (``kvread.KvReader.changes``): every write of an entry, delete
markers included, has a higher stream sequence than what it replaces, so the held entries plus the
changes are exactly what a whole read at the new revision returns. Every :data:`HELD_FOR` seconds, and
whenever a read comes back behind the revision asked for, the key is read whole again (reusing the
decoded entries whose revision did not change), so nothing unforeseen (a bucket recreated by hand)
keeps a stale view for long.

A small key is held too, within a budget of its own (:data:`SMALL_HELD_ENTRIES`, the most recently read
keys): a change to a quiet cluster (one worker more) then costs one short answer instead of every entry
of the key, read and decoded again. A small key let go from that budget is kept encoded, as the JSON the
bucket holds (:data:`SMALL_PACKED_BYTES`, a fifth of its decoded size), which a small key holds beside
its decoded entries from the read or the watch event it had them from, so letting it go encodes nothing:
a burst over more keys than the decoded budget holds, reconciled in turn, would otherwise find none of
them held and read each whole at every decision; decoding the key again costs what a whole read decodes,
without the round trip and the server's lookup. The server finds a filter's changes by walking the
bucket's writes since the held revision, while a whole read looks the key's entries up directly; so a
small key's changes are read only when the event being processed shows the bucket moved at most
:data:`CHANGES_WITHIN` writes since. Otherwise (a burst of writes to many keys, or an input that names no
revision) the key is read whole, still reusing the decoded entries whose revision did not change.

A key held needs no read at all when the inputs carry every write under it since the revision held: a
watch event names the key's write before its own (``WatchEvent.kv_previous``, which the bucket checked
when it stored the write), so a chain of such writes starting at or below the held revision is exactly
what a read would return (:class:`Write`); their objects are applied to the held entries. A key not held
is as good as held empty at revision 0 for a chain that starts there: the first write of a new cluster
proves that nothing was under its key before it.

The snapshots share the decoded entries with each other: ``reconcile`` never mutates its snapshot
(tests/unit/replay/test_determinism.py checks it on every recorded history).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

import msgspec
from nats.aio.client import Client

from schema import subjects
from schema.decision import Snapshot
from schema.keys import ReconcileKey
from services.runtime.backoff import Backoff, retry
from services.runtime.clock import Monotonic
from services.runtime.errors import RetryableError
from services.runtime.kvread import KvEntries, KvReader
from services.runtime.metrics import Tally, meter

_json_decoder: msgspec.json.Decoder[dict[str, Any]] = msgspec.json.Decoder(dict[str, Any])
_json_encoder: Final = msgspec.json.Encoder()
_snapshots = Tally(
    meter(__name__),
    "raybus_snapshots_total",
    description="snapshots by how they were had (raybus.snapshot: whole, changes, applied)",
)
_WHOLE, _CHANGES, _APPLIED = "whole", "changes", "applied"

BEHIND_BACKOFF: Final = Backoff(base=0.005, cap=0.1)
"""Pauses between reads while the answering replica is behind the revision asked for."""

HELD_FROM: Final = 256
"""Entries from which a key's decoded snapshot is held between reads."""

HELD_ENTRIES: Final = 20_000
"""Decoded entries held over all keys (about 25 KB each for a Pod)."""

SMALL_HELD_ENTRIES: Final = 1_000
"""Decoded entries held over the keys smaller than :data:`HELD_FROM` (about 25 MB of Pods)."""

SMALL_PACKED_BYTES: Final = 64 * 2**20
"""JSON bytes of the small keys let go from :data:`SMALL_HELD_ENTRIES`, kept encoded (4 to 6 KB a Pod)."""

CHANGES_WITHIN: Final = 1_000
"""Writes to the bucket since a small key's held revision up to which only its changes are read."""

HELD_FOR: Final = 30.0
"""Seconds after which a held key is read whole again."""


class _Behind(RetryableError):
    """The KV answered with a revision older than the one asked for."""


Entries = dict[str, dict[str, dict[str, Any]]]
"""entry kind → name → object, as a :class:`Snapshot` holds them."""


@dataclass(frozen=True)
class Write:
    """A write under a key that an input carries: its revision, the revision of the key's write before it
    (as the bucket checked it), the entry it wrote, and how to have the JSON of that entry's object, had
    only when applied (None: the entry was deleted)."""

    revision: int
    previous: int
    entry_kind: str
    name: str
    encoded: Callable[[], bytes] | None


@dataclass
class _Held:
    """A key's decoded entries as of ``revision``, the revision of each entry's write, and, for a small
    key, the JSON each entry was decoded from (None for a large one, whose entries would be held twice).
    Its maps are never changed once built (``_applied`` makes new ones), so a packed key shares them."""

    revision: int
    read_at: float
    entries: Entries
    written: dict[str, int]
    encoded: dict[str, bytes] | None

    def size(self) -> int:
        return len(self.written)

    def packed(self) -> _Packed:
        """The same entries, encoded: as they were read where that is kept, else encoded again."""
        encoded = self.encoded or {}
        if len(encoded) < len(self.written):
            encoded = dict(encoded)
            for kv_key in self.written.keys() - encoded.keys():
                entry_kind, name = subjects.entry_kind_and_name(kv_key)
                encoded[kv_key] = _json_encoder.encode(self.entries[entry_kind][name])
        return _Packed(revision=self.revision, read_at=self.read_at, written=self.written, encoded=encoded)


@dataclass(frozen=True)
class _Packed:
    """A key's entries as of ``revision``: the revision of each entry's write and the JSON of its object."""

    revision: int
    read_at: float
    written: dict[str, int]
    encoded: dict[str, bytes]

    def size(self) -> int:
        return sum(map(len, self.encoded.values()))

    def unpacked(self) -> _Held:
        """The same entries, decoded."""
        entries: Entries = {}
        for kv_key, value in self.encoded.items():
            entry_kind, name = subjects.entry_kind_and_name(kv_key)
            entries.setdefault(entry_kind, {})[name] = _json_decoder.decode(value)
        return _Held(
            revision=self.revision, read_at=self.read_at, entries=entries, written=self.written, encoded=self.encoded
        )


_Change = tuple[str, str, str, int, bytes | None, dict[str, Any] | None]
"""One write to apply to held entries: entry kind, name, KV key, revision, the object's JSON and the
object (None, None: deleted)."""


def _nothing(revision: int, read_at: float) -> _Held:
    """A key held empty as of ``revision``."""
    return _Held(revision=revision, read_at=read_at, entries={}, written={}, encoded={})


def _applied(base: _Held, changes: Iterable[_Change], revision: int) -> _Held:
    """``base`` at ``revision`` with ``changes`` applied, in new maps (a snapshot handed out stays as it
    was read); the entries' JSON is kept where ``base`` keeps it."""
    entries = {kind: dict(by_name) for kind, by_name in base.entries.items()}
    written = dict(base.written)
    encoded = dict(base.encoded) if base.encoded is not None else None
    for entry_kind, name, kv_key, written_at, raw, value in changes:
        if raw is None or value is None:
            entries.get(entry_kind, {}).pop(name, None)
            written.pop(kv_key, None)
            if encoded is not None:
                encoded.pop(kv_key, None)
        else:
            entries.setdefault(entry_kind, {})[name] = value
            written[kv_key] = written_at
            if encoded is not None:
                encoded[kv_key] = raw
    kept = {kind: by_name for kind, by_name in entries.items() if by_name}
    return dataclasses.replace(base, revision=revision, entries=kept, written=written, encoded=encoded)


def _decoded(read: KvEntries, reuse: _Held | None) -> Iterator[_Change]:
    """The writes of ``read``; an entry whose write ``reuse`` holds decoded already is not decoded again."""
    for kv_key, entry in read.entries.items():
        entry_kind, name = subjects.entry_kind_and_name(kv_key)
        value: dict[str, Any] | None
        if entry.value is None:
            value = None
        elif reuse is not None and reuse.written.get(kv_key) == entry.revision:
            value = reuse.entries[entry_kind][name]
        else:
            value = _json_decoder.decode(entry.value)
        yield entry_kind, name, kv_key, entry.revision, entry.value, value


def _carried(key: ReconcileKey, write: Write, overwritten: bool) -> _Change:
    """What applying ``write`` under ``key`` changes; when a later write of the same entry ``overwritten``
    it, a stand-in for its object that keeps the entry's place, undecoded."""
    kv_key = subjects.entry_key(key, write.entry_kind, write.name)
    if write.encoded is None:
        return write.entry_kind, write.name, kv_key, write.revision, None, None
    if overwritten:
        return write.entry_kind, write.name, kv_key, write.revision, b"", {}
    raw = write.encoded()
    return write.entry_kind, write.name, kv_key, write.revision, raw, _json_decoder.decode(raw)


def _advanced(key: ReconcileKey, held: _Held, writes: Sequence[Write]) -> _Held | None:
    """``held`` with ``writes`` applied, in new maps, when they chain on from its revision (each write's
    previous revision at most the revision reached before it); None when one does not, because a write
    came between them that no input carries.

    Of several writes of one entry only the last is decoded (a Pod's creation, bind and start often come
    in one fetch); the others are still applied in order, as stand-ins, so the entries keep their order."""
    revision = held.revision
    chained: list[Write] = []
    for write in sorted(writes, key=lambda w: w.revision):
        if write.revision <= revision:
            continue  # held already
        if write.previous > revision:
            return None
        chained.append(write)
        revision = write.revision
    last = {(write.entry_kind, write.name): write for write in chained}
    changes = (_carried(key, write, last[write.entry_kind, write.name] is not write) for write in chained)
    return _applied(held, changes, revision)


class _Sized(Protocol):
    def size(self) -> int: ...


_HeldT = TypeVar("_HeldT", bound=_Sized)


class _Budget(Generic[_HeldT]):
    """Held keys, the least recently read first, within a bound on their size (entries or bytes; a single
    key larger than the bound is still held)."""

    def __init__(self, bound: int) -> None:
        self._bound = bound
        self._total = 0
        self.keys: OrderedDict[ReconcileKey, _HeldT] = OrderedDict()

    def put(self, key: ReconcileKey, held: _HeldT) -> list[tuple[ReconcileKey, _HeldT]]:
        """Hold ``key`` as the most recently read; let the least recently read go beyond the bound, and
        return them."""
        self.pop(key)
        self.keys[key] = held
        self._total += held.size()
        dropped: list[tuple[ReconcileKey, _HeldT]] = []
        while self._total > self._bound and len(self.keys) > 1:
            dropped.append(self.keys.popitem(last=False))
            self._total -= dropped[-1][1].size()
        return dropped

    def pop(self, key: ReconcileKey) -> _HeldT | None:
        """Stop holding ``key``; what was held (None when it was not)."""
        held = self.keys.pop(key, None)
        if held is not None:
            self._total -= held.size()
        return held


class SnapshotReader:
    """Reads snapshots of keys; one instance per connection."""

    def __init__(
        self,
        nc: Client,
        *,
        timeout: float = 5.0,
        clock: Monotonic = time.monotonic,
        held_from: int = HELD_FROM,
        held_entries: int = HELD_ENTRIES,
        small_held_entries: int = SMALL_HELD_ENTRIES,
        small_packed_bytes: int = SMALL_PACKED_BYTES,
        changes_within: int = CHANGES_WITHIN,
    ) -> None:
        self._kv = KvReader(nc)
        self._timeout = timeout
        self._clock = clock
        self._held_from = held_from
        self._changes_within = changes_within
        self._large: _Budget[_Held] = _Budget(held_entries)
        self._small: _Budget[_Held] = _Budget(small_held_entries)
        self._packed: _Budget[_Packed] = _Budget(small_packed_bytes)
        self._had: Counter[str] = Counter()

    def forget(self, which: Callable[[ReconcileKey], bool]) -> None:
        """Read the keys ``which`` selects whole next time: another reader may have decided them since this
        one held them (a partition that comes back), and a decision must not be made on an older revision
        than one already decided on, even where the key's entries did not change."""
        for key in [key for budget in (self._large, self._small, self._packed) for key in budget.keys if which(key)]:
            self._drop(key)

    @property
    def whole_reads(self) -> int:
        """Reads of a whole key so far (the others read only what changed under a held key)."""
        return self._had[_WHOLE]

    @property
    def applied_writes(self) -> int:
        """Snapshots so far that took the inputs' writes instead of a read."""
        return self._had[_APPLIED]

    async def read(
        self, key: ReconcileKey, *, min_revision: int = 0, writes: Sequence[Write] = (), attempts: int = 20
    ) -> Snapshot:
        """The key's snapshot, reflecting at least KV revision ``min_revision``: the held entries with
        ``writes`` applied when they are every write under the key since (module docstring), else read.

        Raises:
            RetryableError: the server did not answer, or never reached ``min_revision``.
        """
        held = self._held(key)
        if held is None and writes:  # a chain from revision 0 is a key that held nothing before it
            held = _nothing(0, self._clock())
        if held is not None and writes and self._young(held):
            advanced = _advanced(key, held, writes)
            if advanced is not None and advanced.revision >= min_revision:
                self._count(_APPLIED)
                self._keep(key, advanced)
                return Snapshot(key=key, entries=advanced.entries, revision=advanced.revision)

        async def once() -> Snapshot:
            held = self._held(key)
            if held is not None and self._changes_suffice(held, min_revision):
                snapshot = await self._read_changes(key, held)
            else:
                snapshot = await self._read_whole(key, held, min_revision)
            if snapshot.revision < min_revision:
                self._drop(key)  # read it whole next time
                raise _Behind(f"KV for {key} did not reach revision {min_revision}")
            return snapshot

        policy = dataclasses.replace(BEHIND_BACKOFF, retries=max(attempts, 1) - 1)
        return await retry(once, policy, transient=lambda exc: isinstance(exc, _Behind))

    def _changes_suffice(self, held: _Held, min_revision: int) -> bool:
        """Whether reading only the changes under ``held`` is due, rather than the whole key: it was read
        whole less than :data:`HELD_FOR` ago, and it is large or the bucket moved little since (module
        docstring)."""
        if not self._young(held):
            return False
        if held.size() >= self._held_from:
            return True
        return min_revision > 0 and min_revision - held.revision <= self._changes_within

    async def _read_whole(self, key: ReconcileKey, held: _Held | None, min_revision: int) -> Snapshot:
        read = await self._kv.entries(subjects.OBJECTS_BUCKET, subjects.entry_prefix(key), timeout=self._timeout)
        self._count(_WHOLE)
        revision = min_revision if read.empty else read.revision  # a prefix never written lacks nothing
        whole = _applied(_nothing(revision, self._clock()), _decoded(read, held), revision)
        self._keep(key, whole)
        return Snapshot(key=key, entries=whole.entries, revision=revision)

    async def _read_changes(self, key: ReconcileKey, held: _Held) -> Snapshot:
        read = await self._kv.changes(
            subjects.OBJECTS_BUCKET, subjects.entry_prefix(key), after=held.revision, timeout=self._timeout
        )
        self._count(_CHANGES)
        if read.entries:
            held = _applied(held, _decoded(read, None), read.revision)
        self._keep(key, held)
        return Snapshot(key=key, entries=held.entries, revision=held.revision)

    def _count(self, how: str) -> None:
        self._had[how] += 1
        _snapshots.add(1, {"raybus.snapshot": how})

    def _young(self, held: _Held) -> bool:
        """Whether ``held`` was read whole less than :data:`HELD_FOR` ago."""
        return self._clock() - held.read_at < HELD_FOR

    def _held(self, key: ReconcileKey) -> _Held | None:
        held = self._large.keys.get(key)
        if held is None:
            held = self._small.keys.get(key)
        if held is None and (packed := self._packed.pop(key)) is not None:
            held = packed.unpacked()
            self._keep(key, held)
        return held

    def _keep(self, key: ReconcileKey, held: _Held) -> None:
        """Hold ``key`` as the most recently read, in the budget its size falls in: a large key decoded
        only (its JSON would hold it twice), a small one with the JSON it was read from, which it is kept
        as when let go, never encoded again."""
        self._drop(key)
        if held.size() >= self._held_from:
            self._large.put(key, dataclasses.replace(held, encoded=None) if held.encoded is not None else held)
            return
        for dropped, let_go in self._small.put(key, held):
            self._packed.put(dropped, let_go.packed())

    def _drop(self, key: ReconcileKey) -> None:
        self._large.pop(key)
        self._small.pop(key)
        self._packed.pop(key)
