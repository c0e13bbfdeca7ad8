"""Serving on loopback or pod ports, without leaking a listener.

A start that fails or is cancelled half-way (a service stopped while it comes up) closes whatever it
opened. asyncio's ``create_server`` cancelled at its last step returns nothing to its caller but keeps
listening, so the start runs in a task of its own that a cancelled caller lets finish and then closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from aiohttp import web

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


async def serve_app(app: web.Application, host: str, ports: Sequence[int]) -> tuple[web.AppRunner, list[int]]:
    """Serve ``app`` on ``host`` at each of ``ports`` (0 picks a free one).

    Returns:
        The runner (``cleanup()`` stops serving) and the bound port of each of ``ports``, in order.
    """
    return await start_cleanly(_serve(app, host, ports), lambda outcome: outcome[0].cleanup())


async def _serve(app: web.Application, host: str, ports: Sequence[int]) -> tuple[web.AppRunner, list[int]]:
    # Imported here: the health server starts its listeners with start_cleanly in processes that never load
    # aiohttp (the reconciler).
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    bound: list[int] = []
    try:
        for port in ports:
            site = web.TCPSite(runner, host, port)
            await site.start()
            sockets = getattr(site._server, "sockets", None)
            bound.append(int(sockets[0].getsockname()[1]) if sockets else port)
    except BaseException:
        await runner.cleanup()
        raise
    return runner, bound
