"""The event plumbing every simulator shares: subscribe, replay what exists, dispatch; and a keyed work queue.

:func:`consume` subscribes *before* listing, so nothing committed in between is missed (the store's
subscription starts at the call), then feeds existing objects as ADDED followed by every change.
Listing a resource the store does not know (a Gateway API CRD that is not installed) yields nothing.

:class:`WorkQueue` is the controller-runtime pattern in miniature: keys are deduplicated while they wait,
one key is processed at a time, and a key can come back after a delay (``add_after``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from kubesim.hooks import GVR, Store, StoreEvent

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


def safe_list(store: Store, gvr: GVR, namespace: str | None = None) -> list[dict[str, Any]]:
    """``store.list``, or nothing when the resource is not registered (absent CRD)."""
    try:
        return store.list(gvr, namespace)
    except Exception:  # the core's "not found" for an unknown resource; absence is a normal case here
        return []


def safe_get(store: Store, gvr: GVR, namespace: str | None, name: str) -> dict[str, Any] | None:
    """``store.get``, or None also when the resource is not registered (absent CRD)."""
    try:
        return store.get(gvr, namespace, name)
    except Exception:  # as in safe_list
        return None


async def consume(
    store: Store, handle: Callable[[StoreEvent], None], *, initial: Iterable[GVR], changes: Iterable[GVR] = ()
) -> None:
    """Feed ``handle`` the existing objects of ``initial`` (as ADDED), then every change of ``initial`` and
    ``changes``, until cancelled."""
    initial = tuple(initial)
    events = store.subscribe({*initial, *changes})
    try:
        for gvr in initial:
            for obj in safe_list(store, gvr):
                handle(StoreEvent("ADDED", gvr, obj))
        async for event in events:
            handle(event)
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


class WorkQueue(Generic[K]):
    """Deduplicating queue of keys, with delayed re-adds."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._waiting: set[K] = set()
        self._timers: set[asyncio.TimerHandle] = set()

    def add(self, key: K) -> None:
        """Queue ``key`` unless it is already waiting."""
        if key not in self._waiting:
            self._waiting.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            self.add(key)

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)

    async def get(self) -> K:
        """The next key (it may be re-added while processed)."""
        key = await self._queue.get()
        self._waiting.discard(key)
        return key

    def close(self) -> None:
        """Cancel the pending delayed adds."""
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()


async def process(queue: WorkQueue[K], reconcile: Callable[[K], None], *, what: str) -> None:
    """Run ``reconcile`` for each queued key until cancelled; a failing key is logged and retried later."""
    try:
        while True:
            key = await queue.get()
            try:
                reconcile(key)
            except Exception:  # one bad object must not stop the simulator; retry it a bit later
                logger.exception("kubesim %s: reconcile of %s failed", what, key)
                queue.add_after(key, 0.5)
    finally:
        queue.close()
