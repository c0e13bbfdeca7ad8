"""A coroutine on a thread of its own: it runs off the caller's thread, stops when asked, and hands back what
it returned or raised."""

from __future__ import annotations

import asyncio
import threading

import pytest

from services.runtime.ownloop import OwnLoop


async def test_the_body_runs_on_its_own_thread_until_asked_to_stop() -> None:
    async def body(stop: asyncio.Event) -> int:
        await stop.wait()
        return threading.get_ident()

    running = OwnLoop(body, name="test-ownloop")
    assert running.alive
    running.request_stop()
    assert await running.result() != threading.get_ident()
    await running.close()
    assert not running.alive


async def test_what_the_body_raises_reaches_the_owner() -> None:
    async def body(stop: asyncio.Event) -> None:
        raise ValueError("broken")

    running = OwnLoop(body, name="test-ownloop")
    with pytest.raises(ValueError, match="broken"):
        await running.result()
    await running.close()


async def test_a_stop_asked_before_the_thread_started_is_not_lost() -> None:
    async def body(stop: asyncio.Event) -> bool:
        await stop.wait()
        return True

    running = OwnLoop(body, name="test-ownloop")
    running.request_stop()  # possibly before the thread's loop exists
    assert await running.result() is True
    await running.close()
