"""Serving an aiohttp application on loopback or pod ports, without leaking a listener.

A start that fails or is cancelled half-way (a service stopped while it comes up) closes whatever it
opened. asyncio's ``create_server`` cancelled at its last step returns nothing to its caller but keeps
listening, so the start runs in a task of its own that a cancelled caller lets finish and then closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiohttp import web


async def serve_app(app: web.Application, host: str, ports: Sequence[int]) -> tuple[web.AppRunner, list[int]]:
    """Serve ``app`` on ``host`` at each of ``ports`` (0 picks a free one).

    Returns:
        The runner (``cleanup()`` stops serving) and the bound port of each of ``ports``, in order.
    """
    starting = asyncio.ensure_future(_serve(app, host, ports))
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        (outcome,) = await asyncio.gather(starting, return_exceptions=True)
        if isinstance(outcome, tuple):
            await outcome[0].cleanup()
        raise


async def _serve(app: web.Application, host: str, ports: Sequence[int]) -> tuple[web.AppRunner, list[int]]:
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
