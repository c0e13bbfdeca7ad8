"""Serving an app leaves no listener behind when its start is cut short, at whatever step."""

from __future__ import annotations

import asyncio
import os

import aiohttp
import pytest
from aiohttp import web

from services.runtime.listen import serve_app


def _open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


async def _hello(_: web.Request) -> web.Response:
    return web.Response(text="hello")


def _app() -> web.Application:
    app = web.Application()
    app.router.add_get("/", _hello)
    return app


async def test_serves_on_every_port_asked_for() -> None:
    runner, ports = await serve_app(_app(), "127.0.0.1", [0, 0])
    try:
        assert len(set(ports)) == 2 and 0 not in ports
        async with aiohttp.ClientSession() as session:
            for port in ports:
                async with session.get(f"http://127.0.0.1:{port}/") as response:
                    assert await response.text() == "hello"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("steps", range(10))
async def test_a_start_cancelled_at_any_step_leaves_no_listener(steps: int) -> None:
    before = _open_descriptors()
    starting = asyncio.ensure_future(serve_app(_app(), "127.0.0.1", [0, 0]))
    for _ in range(steps):
        await asyncio.sleep(0)
    starting.cancel()
    (outcome,) = await asyncio.gather(starting, return_exceptions=True)
    if isinstance(outcome, tuple):  # it finished before the cancel arrived
        await outcome[0].cleanup()
    assert _open_descriptors() <= before


async def test_a_port_in_use_closes_the_ports_already_opened() -> None:
    runner, (taken,) = await serve_app(_app(), "127.0.0.1", [0])
    try:
        before = _open_descriptors()
        with pytest.raises(OSError):
            await serve_app(_app(), "127.0.0.1", [0, taken])
        assert _open_descriptors() <= before
    finally:
        await runner.cleanup()
