"""Fetching from a JetStream pull consumer: one pull request at a time, and a short linger (kopf's batch window).

A :class:`Puller` sends each pull request with ``no_wait`` and ``expires``: the server holds it until at
least one message is stored, delivers what is stored (up to the batch), and ends it at once with a
status (or no status when the batch is full). A fetch returns when its request ends, so a message is
handed over as soon as it is delivered. Each request has a reply subject of its own, so a status that
arrives late, for a request its fetch stopped waiting for, is known for what it is; and the next
request is sent only when the one before has ended, so a message always belongs to the request waited
for. nats-py's own fetch does neither: a late status makes it send a second request that lingers
until it expires, and the message that request takes waits for that expiry (up to the fetch's
timeout) before it is handed over.

In a burst, what arrives within a few milliseconds after a fetch joins it: one batch, one reconcile per
key or one transaction, instead of many small ones. A fetch that brings a single message to a consumer
whose window is at its base is an idle consumer: it is returned at once, as the window would only add
its length to that message's latency. A single message right after fetches of several is a burst
thinning out (its inputs come a few at a time while the rest of the pipeline catches up), and lingers
like them: deciding each of those alone made a burst of 1,000 RayClusters take a third more decisions
and a fifth more status writes (``bench/RESULTS.md``, run entry cfa68b8).

A consumer's window widens while a burst lasts (:class:`Linger`): on a busy machine every batch costs
the whole pipeline work (a snapshot read, a decision, a status write and its watch event, a
transaction), and the messages of a long burst wait in the stream anyway, so taking more of them per
batch saves work everywhere and brings the burst's end sooner. Measured in ``bench/HISTORY.md`` (2026-12-02 · 4c0585e).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

import msgspec

from schema import subjects

if TYPE_CHECKING:  # settings read the default window without importing the client
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription

LINGER_WINDOW = 0.05
"""The default window: long enough to gather a burst's next messages, short against a change's latency."""

LINGER_CAP = 0.4
"""The widest window, reached after a few fetches in a row that each brought several messages."""

LINGER_FETCH_TIMEOUT = 0.01
"""How long the fetch after the window waits for a message when the window gathered none."""

LATE_STATUS: Final = 0.5
"""Seconds after a request's expiry until it is taken for ended without its status (a connection lost
in between loses the status; the server forgets the request when it expires)."""

_ENDED_QUIETLY: Final = frozenset({"404", "408"})
"""Statuses that end a request without an error: nothing more stored (404), expired (408)."""


class _Request:
    """One pull request on the server: how many messages it may still deliver, and when it ends."""

    __slots__ = ("ended", "give_up_at", "left", "reply")

    def __init__(self, reply: str, batch: int, give_up_at: float) -> None:
        self.reply = reply
        self.left = batch
        self.give_up_at = give_up_at
        self.ended: asyncio.Future[Msg | None] = asyncio.get_running_loop().create_future()
        """Done when the request ended: with its status message, or None (its batch delivered)."""


class Puller:
    """The fetches of one pull consumer (module docstring), received on one reply subscription.

    It subscribes at its first fetch and unsubscribes at :meth:`close` (or with the connection).
    """

    def __init__(self, nc: Client, stream: str, consumer: str) -> None:
        self._nc = nc
        self._subject = subjects.pull_request_subject(stream, consumer)
        self._inbox = nc.new_inbox()
        self._sub: Subscription | None = None
        self._tokens = itertools.count()
        self._open: _Request | None = None
        self._arrived: deque[Msg] = deque()

    async def close(self) -> None:
        """Stop receiving: messages delivered and not yet handed over are delivered again after the
        consumer's ack wait."""
        sub, self._sub = self._sub, None
        if sub is not None and not self._nc.is_closed:
            await sub.unsubscribe()

    async def fetch(self, batch: int, *, timeout: float) -> list[Msg]:
        """Up to ``batch`` messages, as soon as at least one is stored, waiting at most ``timeout`` seconds
        (and until the expiry's status comes) for the first.

        Raises:
            TimeoutError: nothing was stored within ``timeout``.
            nats.errors.Error: the server refused the request (e.g. the consumer does not exist), or it
                could not be sent.
        """
        await self._settle()  # a request whose fetch was cancelled ends first, then its messages are taken
        status: Msg | None = None
        if not self._arrived:
            request = await self._request(batch, timeout)
            await self._settle()
            status = request.ended.result() if request.ended.done() else None
        if not self._arrived:
            if status is not None and status.headers and status.headers.get("Status") not in _ENDED_QUIETLY:
                from nats.js.errors import APIError  # here: settings import this module, not the client

                APIError.from_msg(status)
            raise TimeoutError
        return [self._arrived.popleft() for _ in range(min(batch, len(self._arrived)))]

    async def _request(self, batch: int, expires: float) -> _Request:
        if self._sub is None:
            self._sub = await self._nc.subscribe(f"{self._inbox}.*", cb=self._on_message)
        loop = asyncio.get_running_loop()
        reply = f"{self._inbox}.{next(self._tokens)}"
        self._open = request = _Request(reply, batch, loop.time() + expires + LATE_STATUS)
        body = {"batch": batch, "no_wait": True, "expires": int(expires * 1e9)}
        try:
            await self._nc.publish(self._subject, msgspec.json.encode(body), reply=reply)
        except BaseException:
            self._open = None
            raise
        return request

    async def _settle(self) -> None:
        """Wait until the open request (if any) ends, or until it is taken for ended (``LATE_STATUS``)."""
        request = self._open
        if request is None:
            return
        remaining = request.give_up_at - asyncio.get_running_loop().time()
        if remaining > 0:
            await asyncio.wait([request.ended], timeout=remaining)
        if self._open is request:
            self._open = None

    async def _on_message(self, msg: Msg) -> None:
        code = msg.headers.get("Status") if msg.headers else None
        request = self._open
        if code is None:
            # Delivered by the open request, or late by one taken for ended: either way the next fetch's.
            self._arrived.append(msg)
            if request is not None:
                request.left -= 1
                if request.left <= 0:
                    self._end(request, None)
        elif request is not None and msg.subject == request.reply:  # else a late status, of no request open
            self._end(request, msg)

    def _end(self, request: _Request, status: Msg | None) -> None:
        self._open = None
        if not request.ended.done():
            request.ended.set_result(status)


async def fetch_lingering(
    puller: Puller,
    batch: int,
    *,
    timeout: float,
    window: float,
    linger: Callable[[float], Awaitable[None]] = asyncio.sleep,
    lone: bool = False,
) -> list[Msg]:
    """Up to ``batch`` messages: those of one fetch (waiting at most ``timeout`` for the first), and, when it
    brought several (or one, with ``lone``) and left room, those stored in the ``window`` seconds after it,
    or else the first stored within ``LINGER_FETCH_TIMEOUT`` after it (``linger(window)`` is how the window
    passes; a test ends it when it has published what should join).

    Raises:
        TimeoutError: nothing arrived within ``timeout``.
        nats.errors.Error: the fetch failed (the messages already fetched are not acknowledged, so they are
            delivered again).
    """
    msgs = await puller.fetch(batch, timeout=timeout)
    room = batch - len(msgs)
    if window <= 0 or room <= 0 or (len(msgs) < 2 and not lone):
        return msgs
    await linger(window)
    try:
        return msgs + await puller.fetch(room, timeout=LINGER_FETCH_TIMEOUT)
    except TimeoutError:
        return msgs


class Linger:
    """The window of one consumer's lingering fetches, which widens while a burst lasts.

    It starts at ``base``. Each fetch that brings several messages doubles it for the next one, up to
    ``cap``; a fetch that brings one message or none (an idle or lightly loaded consumer) sets it back to
    ``base``. A fetch lingers after a single message only while the window is wider than ``base`` (the
    fetch before brought several), so a single change to an idle consumer never waits for the window. A
    ``base`` of 0 never lingers.
    """

    def __init__(
        self,
        base: float = LINGER_WINDOW,
        cap: float = LINGER_CAP,
        *,
        linger: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.base = max(0.0, base)
        self.cap = max(self.base, cap)
        self.window = self.base
        self._linger = linger

    async def fetch(self, puller: Puller, batch: int, *, timeout: float) -> list[Msg]:
        """:func:`fetch_lingering` with the current window, which the fetch's size then moves.

        Raises:
            TimeoutError: nothing arrived within ``timeout``.
            nats.errors.Error: the fetch failed.
        """
        try:
            msgs = await fetch_lingering(
                puller, batch, timeout=timeout, window=self.window, linger=self._linger, lone=self.window > self.base
            )
        except TimeoutError:
            self.window = self.base
            raise
        self.window = min(self.cap, self.window * 2) if len(msgs) >= 2 else self.base
        return msgs
