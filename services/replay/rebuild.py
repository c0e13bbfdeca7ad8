"""The snapshot a recorded decision saw, rebuilt from the key's inputs, incrementally.

What the reconciler read for a decision was KV ``raybus-objects`` under the key's prefix at revision
``R = batch.snapshot_revision``. Every KV write of an entry is followed by a WatchEvent (or Observation)
carrying that write's revision (``kv_revision``), so the snapshot at ``R`` is, for every entry of the
key, its last input with ``kv_revision <= R`` (a DELETED event removes the entry). Inputs are applied
in ``kv_revision`` order, which is not always stream order (an event is published after its KV write,
so a decision may have read a write whose event comes later in the stream); the whole history is read
before replaying, so such an event is already known.

Incremental: decisions come with (almost always) non-decreasing ``R``, so the timeline keeps the current
entries and applies only the writes between the previous ``R`` and the next; going backwards (two
workers around a partition hand-over) rebuilds from the start. The cost per decision is the writes it
adds plus a shallow copy of the entry maps.

Truncated history (the events stream dropped messages older than its max age): an entry whose first
retained input is ADDED did not exist before it; an entry with no retained input takes its value from
the KV seed (the KV keeps the last write of every entry, delete markers included) from the seed's
revision on; an entry whose first retained input is MODIFIED/DELETED had an unknown value before it.
``complete_from`` is the first revision from which every entry is known: a decision that read an older
revision cannot be verified.

Not here: running reconcile (``replayer``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from schema.decision import Snapshot
from schema.messages import Observation, WatchEvent
from services.replay.history import KeyHistory, entry_of, owner_uid


class _Write(NamedTuple):
    revision: int
    seq: int
    entry_kind: str
    name: str
    value: dict[str, Any] | None
    uid: str


def _writes(history: KeyHistory) -> tuple[list[_Write], int]:
    """Every write of the key in revision order, and the revision from which snapshots are complete."""
    key = history.key
    writes: list[_Write] = []
    first_type: dict[tuple[str, str], tuple[int, bool]] = {}
    for recorded in history.inputs:
        message = recorded.message
        entry = entry_of(message)
        if entry is None:
            continue
        value: dict[str, Any] | None
        if isinstance(message, WatchEvent):
            value = None if message.event_type == "DELETED" else message.object
            revision = message.kv_revision
            is_owner = entry == (key.kind, key.name)
            uid = owner_uid(message.object) if is_owner else ""
            created = message.event_type == "ADDED"
        elif isinstance(message, Observation):
            value = message.data
            revision = message.kv_revision
            uid = ""
            created = False
        else:  # a timer tick writes nothing (entry_of returned None above)
            continue
        writes.append(_Write(revision, recorded.seq, entry[0], entry[1], value, uid))
        known = first_type.get(entry)
        if known is None or revision < known[0]:
            first_type[entry] = (revision, created)
    complete_from = 0
    if history.window.truncated:
        for (_, _), (revision, created) in first_type.items():
            if not created:
                complete_from = max(complete_from, revision)
        for seed in history.kv_seed:
            if (seed.entry_kind, seed.name) in first_type:
                continue
            uid = owner_uid(seed.value) if (seed.entry_kind, seed.name) == (key.kind, key.name) else ""
            writes.append(_Write(seed.revision, 0, seed.entry_kind, seed.name, seed.value, uid))
            complete_from = max(complete_from, seed.revision)
    writes.sort(key=lambda w: (w.revision, w.seq))
    return writes, complete_from


class SnapshotTimeline:
    """Snapshots of one key at increasing KV revisions."""

    def __init__(self, history: KeyHistory) -> None:
        self.key = history.key
        self._writes, self.complete_from = _writes(history)
        self._owner = (self.key.kind, self.key.name)
        self._reset()

    def _reset(self) -> None:
        self._entries: dict[str, dict[str, dict[str, Any]]] = {}
        self._position = 0
        self._revision = -1
        self._owner_uid = ""

    @property
    def owner_uid(self) -> str:
        """The uid of the key's custom resource at the current revision, or of the last one deleted."""
        return self._owner_uid

    def advance(self, revision: int) -> None:
        """Apply every write with a revision up to ``revision`` (rebuilding if it goes backwards)."""
        if revision < self._revision:
            self._reset()
        writes = self._writes
        entries = self._entries
        position = self._position
        end = len(writes)
        while position < end:
            write = writes[position]
            if write.revision > revision:
                break
            by_name = entries.get(write.entry_kind)
            if write.value is None:
                if by_name is not None:
                    by_name.pop(write.name, None)
            elif by_name is None:
                entries[write.entry_kind] = {write.name: write.value}
            else:
                by_name[write.name] = write.value
            if write.uid and (write.entry_kind, write.name) == self._owner:
                self._owner_uid = write.uid
            position += 1
        self._position = position
        self._revision = revision

    def snapshot(self, revision: int) -> Snapshot:
        """The key's snapshot at ``revision``: a fresh mapping over the (shared, never mutated) objects."""
        self.advance(revision)
        entries = {kind: dict(by_name) for kind, by_name in self._entries.items() if by_name}
        return Snapshot(key=self.key, entries=entries, revision=revision)

    def complete_at(self, revision: int) -> bool:
        """Whether every entry's value at ``revision`` is known (see the module docstring)."""
        return revision >= self.complete_from
