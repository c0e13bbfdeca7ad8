"""Fetching from a JetStream pull consumer with a short linger (kopf's batch window).

In a burst, what arrives within a few milliseconds after a fetch joins it: one batch, one reconcile per
key or one transaction, instead of many small ones. A fetch that brings a single message is an idle
consumer: it is returned at once, as the window would only add its length to that message's latency.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # settings read the default window without importing the client
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext

LINGER_WINDOW = 0.05
"""The default window: long enough to gather a burst's next messages, short against a change's latency."""

LINGER_FETCH_TIMEOUT = 0.01
"""How long the second fetch waits: what the window gathered is already there."""


async def fetch_lingering(
    sub: JetStreamContext.PullSubscription, batch: int, *, timeout: float, window: float
) -> list[Msg]:
    """Up to ``batch`` messages: those of one fetch (waiting at most ``timeout`` for the first), and, when it
    brought several and left room, what arrived in the ``window`` seconds after it.

    Raises:
        TimeoutError: nothing arrived within ``timeout``.
        nats.errors.Error: the fetch failed (the messages already fetched are not acknowledged, so they are
            delivered again).
    """
    msgs = await sub.fetch(batch, timeout=timeout)
    room = batch - len(msgs)
    if window <= 0 or room <= 0 or len(msgs) < 2:
        return msgs
    await asyncio.sleep(window)
    try:
        msgs += await sub.fetch(room, timeout=LINGER_FETCH_TIMEOUT)
    except TimeoutError:  # nats-py raises its own subclass or the builtin
        pass
    return msgs
