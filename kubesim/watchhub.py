"""Watch fan-out: the retained event window per resource, and one unbounded queue per watcher.

Every committed change becomes one :class:`Change`. The hub keeps the last ``window`` changes of each
resource (so a watch can resume from a resourceVersion, or learn it is too old: 410 Gone) and hands
each change to the watchers of that resource whose namespace and selectors match. A change's JSON is
encoded once per apiVersion and the same bytes go to every watcher. Queues are unbounded on purpose:
a watch must never drop or reorder an event, and a slow client only costs memory, as in the real
server until it closes the stream.

Selectors apply as in the real watch cache: an object that stops matching is delivered as DELETED,
one that starts matching as ADDED.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from kubesim import codec
from kubesim.errors import gone
from kubesim.hooks import GVR, EventType, StoreEvent
from kubesim.resources import StorageKey
from kubesim.selectors import Matcher

Obj = dict[str, Any]


class Change:
    """One committed event, with its JSON cached per apiVersion."""

    __slots__ = ("_body", "gvr", "key", "obj", "old", "rv", "type")

    def __init__(self, *, rv: int, type: EventType, key: StorageKey, gvr: GVR, obj: Obj, old: Obj | None) -> None:
        self.rv = rv
        self.type = type
        self.key = key
        self.gvr = gvr
        self.obj = obj
        self.old = old
        self._body: dict[str, bytes] = {}

    def body(self, api_version: str) -> bytes:
        """The object's JSON as seen at ``api_version``."""
        cached = self._body.get(api_version)
        if cached is None:
            obj = self.obj
            if obj.get("apiVersion") != api_version:
                obj = {**obj, "apiVersion": api_version}
            cached = self._body[api_version] = codec.encode(obj)
        return cached


def event_line(type_: str, body: bytes) -> bytes:
    """One line of a watch stream."""
    return b'{"type":"' + type_.encode() + b'","object":' + body + b"}\n"


@dataclass(eq=False)
class Watcher:
    """One open watch: what it selects, and the lines waiting to be written to it."""

    key: StorageKey
    namespace: str | None
    matcher: Matcher | None
    api_version: str
    render: Callable[[Obj], bytes] | None = None
    """Encodes objects for this watcher alone (kubectl's Table watches); None = the shared encoding."""
    queue: asyncio.Queue[bytes] = field(default_factory=asyncio.Queue)

    def offer(self, change: Change) -> None:
        """Queue ``change`` if this watcher selects it (translating selector transitions)."""
        obj = change.obj
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return
        type_: str = change.type
        if self.matcher is not None:
            now = self.matcher(obj)
            if type_ == "MODIFIED":
                before = change.old is not None and self.matcher(change.old)
                if now and not before:
                    type_ = "ADDED"
                elif before and not now:
                    type_ = "DELETED"
                elif not now:
                    return
            elif not now:
                return
        body = change.body(self.api_version) if self.render is None else self.render(obj)
        self.queue.put_nowait(event_line(type_, body))


class Subscription:
    """An in-process subscriber (``Store.subscribe``): every change of ``resources`` (None: of all), with
    the committed object itself (read-only: the store never changes one in place)."""

    def __init__(self, hub: WatchHub, resources: Collection[GVR] | None = None) -> None:
        self._hub = hub
        self._resources = None if resources is None else frozenset(resources)
        self._queue: asyncio.Queue[Change] = asyncio.Queue()
        hub.subscriptions.append(self)

    def push(self, change: Change) -> None:
        """Queue a change (called by the hub) if it is of a resource subscribed to."""
        if self._resources is None or change.gvr in self._resources:
            self._queue.put_nowait(change)

    def __aiter__(self) -> AsyncIterator[StoreEvent]:
        return self

    async def __anext__(self) -> StoreEvent:
        change = await self._queue.get()
        return StoreEvent(change.type, change.gvr, change.obj)

    async def aclose(self) -> None:
        """Stop receiving changes."""
        if self in self._hub.subscriptions:
            self._hub.subscriptions.remove(self)


class WatchHub:
    """Retained history per resource plus the live watchers and subscribers."""

    def __init__(self, *, window: int) -> None:
        self.window = window
        self._history: dict[StorageKey, deque[Change]] = {}
        self._evicted_rv: dict[StorageKey, int] = {}
        self._watchers: dict[StorageKey, set[Watcher]] = {}
        self.subscriptions: list[Subscription] = []

    def publish(self, change: Change) -> None:
        """Record ``change`` and deliver it to every interested watcher and subscriber."""
        history = self._history.get(change.key)
        if history is None:
            history = self._history[change.key] = deque()
        history.append(change)
        if len(history) > self.window:
            self._evicted_rv[change.key] = history.popleft().rv
        for watcher in self._watchers.get(change.key, ()):
            watcher.offer(change)
        for sub in self.subscriptions:
            sub.push(change)

    def changes_since(self, key: StorageKey, rv: int) -> Iterable[Change]:
        """Retained changes of one resource after ``rv``.

        Raises:
            ApiError: 410 Gone when changes after ``rv`` have already been evicted.
        """
        evicted = self._evicted_rv.get(key, 0)
        history = self._history.get(key, deque())
        if rv < evicted:
            oldest = history[0].rv if history else evicted + 1
            raise gone(f"too old resource version: {rv} ({oldest - 1})")
        return [c for c in history if c.rv > rv]

    def add(self, watcher: Watcher) -> None:
        """Start delivering live changes to ``watcher``."""
        self._watchers.setdefault(watcher.key, set()).add(watcher)

    def remove(self, watcher: Watcher) -> None:
        """Stop delivering to ``watcher``."""
        watchers = self._watchers.get(watcher.key)
        if watchers is not None:
            watchers.discard(watcher)
