"""The hand-over of informer batches from threads to the event loop: order, backpressure, stopping."""

from __future__ import annotations

import asyncio
import threading

from services.edge.resources import by_kind
from services.edge.watch.informer import Batch, Bookmark, Handoff, Scope
from tests.helpers import eventually

WAIT = 30.0
"""Seconds a test waits for a thread; only reached when something is broken."""


def _batch(n: int) -> Batch:
    resource = by_kind("Pod")
    assert resource is not None
    return Batch(Scope(resource), (Bookmark(str(n)),))


def _number(batch: Batch) -> int:
    item = batch.items[0]
    assert isinstance(item, Bookmark)
    return int(item.resource_version)


def _deliver_all(handoff: Handoff, numbers: range, results: list[bool]) -> threading.Thread:
    def run() -> None:
        results.extend(handoff.deliver(_batch(n)) for n in numbers)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def test_each_threads_batches_arrive_in_order_and_none_is_lost() -> None:
    handoff = Handoff(asyncio.get_running_loop(), 8, threading.Event())
    results: list[list[bool]] = [[], []]
    threads = [
        _deliver_all(handoff, range(0, 500), results[0]),
        _deliver_all(handoff, range(1000, 1500), results[1]),
    ]
    got = [_number(await asyncio.wait_for(handoff.get(), WAIT)) for _ in range(1000)]
    for thread in threads:
        await asyncio.to_thread(thread.join, WAIT)
    assert [n for n in got if n < 1000] == list(range(0, 500))
    assert [n for n in got if n >= 1000] == list(range(1000, 1500))
    assert results == [[True] * 500, [True] * 500]


async def test_a_thread_waits_while_the_loop_holds_size_batches_untaken() -> None:
    handoff = Handoff(asyncio.get_running_loop(), 2, threading.Event())
    results: list[bool] = []
    thread = _deliver_all(handoff, range(3), results)
    await eventually(lambda: len(results) >= 2, timeout=WAIT)  # two go through with nobody taking them
    await asyncio.sleep(0.3)  # a chance for the third to get through, which it must not
    assert results == [True, True] and thread.is_alive()
    assert _number(await asyncio.wait_for(handoff.get(), WAIT)) == 0
    await asyncio.to_thread(thread.join, WAIT)
    assert results == [True, True, True]
    assert [_number(await asyncio.wait_for(handoff.get(), WAIT)) for _ in range(2)] == [1, 2]


async def test_stopping_releases_a_waiting_thread_without_delivering() -> None:
    stopping = threading.Event()
    handoff = Handoff(asyncio.get_running_loop(), 1, stopping)
    results: list[bool] = []
    thread = _deliver_all(handoff, range(2), results)
    await eventually(lambda: results, timeout=WAIT)
    stopping.set()
    await asyncio.to_thread(thread.join, WAIT)
    assert results == [True, False]
    assert handoff.deliver(_batch(9)) is False
