"""Backoff: the one delay policy for whatever is tried again, and the one async retry loop.

:class:`Backoff` is pure (exponential growth from ``base`` by ``factor``, never above ``cap``, an optional
limit on retries), so a thread (an informer) asks it for a delay and waits its own way, and a redelivery
hands its delay to JetStream. :func:`retry` runs an awaitable again while its error is transient,
pausing per the policy. Each caller keeps its own numbers as a named :class:`Backoff` in its module.

Deterministic on purpose: no caller needs jitter (NATS and the API server see few retrying clients, and
the API budget already paces the applier), and a fixed sequence keeps logs and tests predictable.

Not here: what counts as transient (each caller's predicate), pacing of normal work (``throttle``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from services.runtime.aio import raise_if_cancelling

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]
"""Waits the given number of seconds (``asyncio.sleep``, or one a stop request cuts short)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Seconds to wait after consecutive failures: ``base``, ``base * factor``, ... capped at ``cap``.

    ``retries`` bounds the retries after the first try (None: retry until success or a stop).
    """

    base: float
    cap: float
    factor: float = 2.0
    retries: int | None = None

    def __post_init__(self) -> None:
        if self.base < 0 or self.cap < self.base or self.factor < 1:
            raise ValueError(f"need 0 <= base <= cap and factor >= 1, got {self}")
        if self.retries is not None and self.retries < 0:
            raise ValueError(f"retries must be None or >= 0, got {self.retries}")

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1-based; less counts as 1)."""
        try:
            grown = self.base * self.factor ** (max(failures, 1) - 1)
        except OverflowError:  # long past the cap
            return self.cap
        return min(self.cap, grown)

    def exhausted(self, failures: int) -> bool:
        """No retry is left after ``failures`` consecutive failures."""
        return self.retries is not None and failures > self.retries


def interruptible(stop: asyncio.Event) -> Sleep:
    """A sleep that ends as soon as ``stop`` is set (pair it with ``give_up=stop.is_set``)."""

    async def sleep(seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)

    return sleep


def _never() -> bool:
    return False


def _no_request(_: Exception) -> float:
    return 0.0


async def retry(
    operation: Callable[[], Awaitable[T]],
    policy: Backoff,
    *,
    transient: Callable[[Exception], bool],
    give_up: Callable[[], bool] = _never,
    requested: Callable[[Exception], float] = _no_request,
    on_retry: Callable[[Exception, int, float], None] | None = None,
    sleep: Sleep = asyncio.sleep,
) -> T:
    """Await ``operation()`` until it succeeds, pausing per ``policy`` after each transient failure.

    Args:
        operation: makes a fresh awaitable for each try.
        policy: the pauses, and how many retries there are.
        transient: whether an error is worth another try; any other error propagates at once.
        give_up: asked after each failure and after each pause; True ends the retries (a stop request,
            or a newer write made this one pointless).
        requested: the pause an error itself asks for (a ``Retry-After``); the longer one is kept.
        on_retry: told (error, failures so far, seconds) before each pause, to log it.
        sleep: how to pause (injected by tests, or :func:`interruptible`).

    Raises:
        Exception: the last transient error, once the policy is exhausted or ``give_up`` said so.
        asyncio.CancelledError: the task was cancelled, also when a library swallowed it mid-try.
    """
    failures = 0
    while True:
        raise_if_cancelling()
        try:
            return await operation()
        except Exception as exc:
            raise_if_cancelling()
            if not transient(exc):
                raise
            failures += 1
            if policy.exhausted(failures) or give_up():
                raise
            seconds = max(policy.delay(failures), requested(exc))
            if on_retry is not None:
                on_retry(exc, failures, seconds)
            await sleep(seconds)
            if give_up():
                raise
