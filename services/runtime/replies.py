"""Answers to many requests on one subscription: reply subjects ``<inbox>.<n>`` under a connection's inbox.

nats-py's requests subscribe a reply subject of their own, or draw a random token for each from the
kernel; a counter under one wildcard subscription tells the answers apart for nothing. Batched KV reads
(``kvread``) and acknowledged publishes (``publishing``) use it; a pull consumer's requests
(``fetching``) keep their own, as a message delivered on a request's subject belongs to whichever fetch
runs next.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Generic, TypeVar

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

W = TypeVar("W")


class Replies(Generic[W]):
    """Waiters for answers, each named by the reply subject :meth:`open` gives it; ``deliver`` hands each
    answer to its waiter. It subscribes at the first :meth:`open` and unsubscribes at :meth:`close` (or with
    the connection)."""

    def __init__(self, nc: Client, deliver: Callable[[W, Msg], None]) -> None:
        self._nc = nc
        self._deliver = deliver
        self._inbox = nc.new_inbox()
        self._sub: Subscription | None = None
        self._subscribing = asyncio.Lock()
        self._tokens = itertools.count()
        self._waiting: dict[str, W] = {}

    async def open(self, waiter: W) -> str:
        """A fresh reply subject whose answers go to ``waiter`` until :meth:`drop`."""
        if self._sub is None:
            async with self._subscribing:
                if self._sub is None:
                    self._sub = await self._nc.subscribe(f"{self._inbox}.*", cb=self._on_reply)
        reply = f"{self._inbox}.{next(self._tokens)}"
        self._waiting[reply] = waiter
        return reply

    def drop(self, reply: str) -> None:
        """Stop handing answers on ``reply`` to its waiter."""
        self._waiting.pop(reply, None)

    async def close(self) -> None:
        """Stop receiving answers; a request under way gets none more."""
        sub, self._sub = self._sub, None
        if sub is not None and not self._nc.is_closed:
            await sub.unsubscribe()

    async def _on_reply(self, msg: Msg) -> None:
        waiter = self._waiting.get(msg.subject)
        if waiter is not None:  # else the answer of a request that gave up
            self._deliver(waiter, msg)
