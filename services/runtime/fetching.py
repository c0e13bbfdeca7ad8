"""Fetching from a JetStream pull consumer with a short linger (kopf's batch window).

In a burst, what arrives within a few milliseconds after a fetch joins it: one batch, one reconcile per
key or one transaction, instead of many small ones. A fetch that brings a single message is an idle
consumer: it is returned at once, as the window would only add its length to that message's latency.

A consumer's window widens while a burst lasts (:class:`Linger`): on a busy machine every batch costs
the whole pipeline work (a snapshot read, a decision, a status write and its watch event, a
transaction), and the messages of a long burst wait in the stream anyway, so taking more of them per
batch saves work everywhere and brings the burst's end sooner. Measured in ``bench/HISTORY.md`` (2026-12-02 · 4c0585e).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # settings read the default window without importing the client
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext

LINGER_WINDOW = 0.05
"""The default window: long enough to gather a burst's next messages, short against a change's latency."""

LINGER_CAP = 0.4
"""The widest window, reached after a few fetches in a row that each brought several messages."""

LINGER_FETCH_TIMEOUT = 0.01
"""How long the second fetch waits: what the window gathered is already there."""


async def fetch_lingering(
    sub: JetStreamContext.PullSubscription,
    batch: int,
    *,
    timeout: float,
    window: float,
    linger: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> list[Msg]:
    """Up to ``batch`` messages: those of one fetch (waiting at most ``timeout`` for the first), and, when it
    brought several and left room, what arrived in the ``window`` seconds after it (``linger(window)`` is
    how the window passes; a test ends it when it has published what should join).

    Raises:
        TimeoutError: nothing arrived within ``timeout``.
        nats.errors.Error: the fetch failed (the messages already fetched are not acknowledged, so they are
            delivered again).
    """
    msgs = await sub.fetch(batch, timeout=timeout)
    if not msgs:
        # nats-py ends a fetch with no message, not a timeout, when a status meant for an earlier pull (the
        # expiry of one that timed out on this side) arrives while it waits: to the caller, nothing arrived.
        raise TimeoutError
    room = batch - len(msgs)
    if window <= 0 or room <= 0 or len(msgs) < 2:
        return msgs
    await linger(window)
    try:
        msgs += await sub.fetch(room, timeout=LINGER_FETCH_TIMEOUT)
    except TimeoutError:  # nats-py raises its own subclass or the builtin
        pass
    return msgs


class Linger:
    """The window of one consumer's lingering fetches, which widens while a burst lasts.

    It starts at ``base``. Each fetch that brings several messages doubles it for the next one, up to
    ``cap``; a fetch that brings one message or none (an idle or lightly loaded consumer) sets it back to
    ``base``, so a single change never waits for the window. A ``base`` of 0 never lingers.
    """

    def __init__(self, base: float = LINGER_WINDOW, cap: float = LINGER_CAP) -> None:
        self.base = max(0.0, base)
        self.cap = max(self.base, cap)
        self.window = self.base

    async def fetch(self, sub: JetStreamContext.PullSubscription, batch: int, *, timeout: float) -> list[Msg]:
        """:func:`fetch_lingering` with the current window, which the fetch's size then moves.

        Raises:
            TimeoutError: nothing arrived within ``timeout``.
            nats.errors.Error: the fetch failed.
        """
        try:
            msgs = await fetch_lingering(sub, batch, timeout=timeout, window=self.window)
        except TimeoutError:
            self.window = self.base
            raise
        self.window = min(self.cap, self.window * 2) if len(msgs) >= 2 else self.base
        return msgs
