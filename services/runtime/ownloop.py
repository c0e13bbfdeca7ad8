"""A coroutine on a thread of its own, with its own event loop.

Work whose timing must not depend on how busy the caller's event loop is runs here: renewing a lease
before it lapses. On a shared loop a renewal waits behind every callback ready to run; a process whose
loop is busy for seconds (a watch process listing and projecting 10,000 objects after a restart, a
replica throttled by a tight CPU quota) then lost its leases again and again for nothing. A thread of its
own gets the interpreter every few milliseconds whatever the loop does.

The body gets a ``stop`` event of its own loop, set when the owner asks (:meth:`OwnLoop.request_stop`,
also from a task being cancelled) or, should the owner never ask, once the owner's event loop is closed:
a thread that outlived its owner would renew leases nobody uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Final, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

OWNER_CHECK_INTERVAL: Final = 1.0
"""Seconds between two looks at whether the owner's event loop is closed."""


class OwnLoop(Generic[T]):
    """Runs ``body(stop)`` on a new thread and event loop from construction on; :meth:`result` waits for it."""

    def __init__(self, body: Callable[[asyncio.Event], Awaitable[T]], *, name: str) -> None:
        self._body = body
        self._name = name
        self._owner = asyncio.get_running_loop()
        self._done: asyncio.Future[T] = self._owner.create_future()
        self._lock = threading.Lock()
        """Guards the three fields below between the owner and the thread."""
        self._halted = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """The thread still runs."""
        return self._thread.is_alive()

    def request_stop(self) -> None:
        """Tell the body to end; returns at once (no await, so a cancellation cannot skip it)."""
        with self._lock:
            self._halted = True
            loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the thread's loop has ended already
                loop.call_soon_threadsafe(stop.set)

    async def result(self) -> T:
        """What the body returned, once it has (its exception re-raised); a cancelled wait leaves it running."""
        return await asyncio.shield(self._done)

    async def close(self) -> None:
        """Stop the body and wait for the thread."""
        self.request_stop()
        await asyncio.to_thread(self._thread.join)

    def _main(self) -> None:
        try:
            outcome: T | BaseException = asyncio.run(self._run())
        except BaseException as exc:  # logged here and handed to the owner, who decides
            log.exception("%s: the thread failed", self._name)
            outcome = exc
        with contextlib.suppress(RuntimeError):  # the owner's loop is closed: nobody waits any more
            self._owner.call_soon_threadsafe(self._settle, outcome)

    def _settle(self, outcome: T | BaseException) -> None:
        if self._done.done():
            return
        if isinstance(outcome, BaseException):
            self._done.set_exception(outcome)
            self._done.exception()  # retrieved here: an owner that stopped waiting must not be warned
        else:
            self._done.set_result(outcome)

    async def _run(self) -> T:
        stop = asyncio.Event()
        with self._lock:
            self._loop, self._stop = asyncio.get_running_loop(), stop
            if self._halted:
                stop.set()
        watching = asyncio.ensure_future(self._watch_owner(stop))
        try:
            return await self._body(stop)
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching

    async def _watch_owner(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self._owner.is_closed():
                log.warning("%s: its owner's event loop is closed; stopping", self._name)
                stop.set()
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), OWNER_CHECK_INTERVAL)
