"""Informer resume points: which resourceVersion each scope has fully published, and their KV storage.

Role: the projection writes events concurrently (a bounded window), so "published up to rv X" means
every event of the scope up to X has finished, in arrival order. :class:`Watermarks` tracks that with
one ticket per informer item; the committed resourceVersion only moves past a ticket once it and every
earlier ticket of its scope are done. Committed points are written to KV ``raybus-watcher``
(``subjects.resume_key(scope)``) by a periodic flush and on shutdown, not per event: resuming from a
slightly older point only re-sends events that JetStream de-duplicates (Nats-Msg-Id).

Invariants: a committed point never runs ahead of a write that has not finished.

Not here: what the writes are (``projection``).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable

from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from schema import subjects

log = logging.getLogger(__name__)


class Ticket:
    """One informer item in flight; ``done()`` it when its writes have finished."""

    __slots__ = ("_owner", "done_flag", "resource_version", "scope")

    def __init__(self, owner: Watermarks, scope: str, resource_version: str) -> None:
        self._owner = owner
        self.scope = scope
        self.resource_version = resource_version
        self.done_flag = False

    def done(self) -> None:
        """Mark finished and advance the scope's committed point as far as possible."""
        self.done_flag = True
        self._owner._advance(self.scope)


class Watermarks:
    """Per-scope committed resourceVersions behind a window of concurrently finishing items."""

    def __init__(self, initial: dict[str, str] | None = None) -> None:
        self._pending: dict[str, deque[Ticket]] = {}
        self._committed: dict[str, str] = dict(initial or {})
        self._dirty: set[str] = set()

    def open(self, scope: str, resource_version: str) -> Ticket:
        """A ticket for the next item of ``scope`` (in arrival order)."""
        ticket = Ticket(self, scope, resource_version)
        self._pending.setdefault(scope, deque()).append(ticket)
        return ticket

    def _advance(self, scope: str) -> None:
        pending = self._pending.get(scope)
        if not pending:
            return
        moved = False
        while pending and pending[0].done_flag:
            ticket = pending.popleft()
            if ticket.resource_version:
                self._committed[scope] = ticket.resource_version
                moved = True
        if moved:
            self._dirty.add(scope)

    def committed(self, scope: str) -> str | None:
        """The scope's committed resourceVersion."""
        return self._committed.get(scope)

    def take_dirty(self) -> dict[str, str]:
        """Committed points changed since the last call."""
        dirty = {scope: self._committed[scope] for scope in self._dirty}
        self._dirty.clear()
        return dirty

    def in_flight(self) -> int:
        """Tickets not yet committed."""
        return sum(len(q) for q in self._pending.values())


async def load_resume_points(kv: KeyValue, scopes: Iterable[str]) -> dict[str, str]:
    """The stored resume point of each scope that has one."""
    points: dict[str, str] = {}
    for scope in scopes:
        try:
            entry = await kv.get(subjects.resume_key(scope))
        except KeyNotFoundError:
            continue
        if entry.value:
            points[scope] = entry.value.decode()
    return points


async def store_resume_points(kv: KeyValue, points: dict[str, str]) -> None:
    """Write resume points (last writer wins: HA replicas store near-identical points)."""
    for scope, resource_version in points.items():
        await kv.put(subjects.resume_key(scope), resource_version.encode())
