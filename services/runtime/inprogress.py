"""Keeping fetched JetStream messages in progress while they are worked on.

A message not acked within its consumer's ``ack_wait`` is delivered again; work that can outlast it (a
large reconcile, a batch split to find the row the database refuses, a slow disk on a busy machine)
would then run twice. While the context is open, every message not yet acked is told "in progress"
three times per ``ack_wait``. The messages are read anew at each tick, so a live collection (the
applier's outstanding batches) can come and go while the context stays open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Collection

from nats.aio.msg import Msg
from nats.errors import Error as NatsError

log = logging.getLogger(__name__)


async def _tick(msgs: Collection[Msg], ack_wait: float) -> None:
    while True:
        await asyncio.sleep(ack_wait / 3)
        for msg in list(msgs):  # a copy: the collection may change while in-progress is sent
            if not msg.is_acked:
                try:
                    await msg.in_progress()
                except NatsError as exc:  # lost: at worst the message comes back after ack_wait
                    log.warning("in-progress not sent (%s); the message may be redelivered", exc)


@contextlib.asynccontextmanager
async def kept_in_progress(msgs: Collection[Msg], ack_wait: float) -> AsyncIterator[None]:
    """While the block runs, keep ``msgs`` (those not yet acked) from being redelivered."""
    ticker = asyncio.create_task(_tick(msgs, ack_wait))
    try:
        yield
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
