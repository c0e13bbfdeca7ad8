"""Serving on loopback or pod ports, without leaking a listener.

A start that fails or is cancelled half-way (a service stopped while it comes up) closes whatever it
opened. asyncio's ``create_server`` cancelled at its last step returns nothing to its caller but keeps
listening, so the start runs in a task of its own that a cancelled caller lets finish and then closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

Started = TypeVar("Started")


async def start_cleanly(start: Coroutine[Any, Any, Started], close: Callable[[Started], Awaitable[None]]) -> Started:
    """Await ``start``; if the caller is cancelled meanwhile, let it finish, ``close`` what it opened, and
    re-raise the cancellation."""
    starting = asyncio.ensure_future(start)
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        (outcome,) = await asyncio.gather(starting, return_exceptions=True)
        if not isinstance(outcome, BaseException):
            await close(outcome)
        raise
