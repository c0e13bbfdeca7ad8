"""Fetching with a linger, against a real nats-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from services.runtime.fetching import Linger, fetch_lingering
from tests.fixtures.nats import NatsServer

SUBJECT = "linger.test"


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    await client.jetstream().add_stream(StreamConfig(name="LINGER", subjects=[SUBJECT]))
    try:
        yield client
    finally:
        await client.close()


async def _pull(nc: Client, durable: str) -> tuple[JetStreamContext, JetStreamContext.PullSubscription]:
    js = nc.jetstream()
    return js, await js.pull_subscribe(SUBJECT, durable=durable)


async def _publish(js: JetStreamContext, count: int) -> None:
    for n in range(count):
        await js.publish(SUBJECT, str(n).encode())


async def test_what_arrives_within_the_window_joins_the_batch_or_the_next(nc: Client) -> None:
    js, sub = await _pull(nc, "lingering")
    window_open = asyncio.Event()
    published = asyncio.Event()

    async def linger(window: float) -> None:
        assert window == 3.0
        window_open.set()
        await published.wait()

    await _publish(js, 2)
    fetching = asyncio.create_task(fetch_lingering(sub, 10, timeout=5.0, window=3.0, linger=linger))
    await asyncio.wait_for(window_open.wait(), timeout=60)
    await _publish(js, 3)
    # The window's messages are stored before it ends; the fetch after it (a short one, by design) can
    # still miss them on a loaded machine, so what it did not take is what the next fetch brings.
    published.set()
    msgs = await fetching
    assert [m.data for m in msgs[:2]] == [b"0", b"1"]
    rest = [m.data for m in msgs[2:]]
    while len(rest) < 3:
        rest += [m.data for m in await sub.fetch(3 - len(rest), timeout=5.0)]
    assert rest == [b"0", b"1", b"2"]


async def test_a_lone_message_is_returned_without_the_window(nc: Client) -> None:
    js, sub = await _pull(nc, "alone")
    await _publish(js, 1)
    msgs = await asyncio.wait_for(fetch_lingering(sub, 10, timeout=5.0, window=600.0), timeout=60)
    assert [m.data for m in msgs] == [b"0"]


async def test_nothing_to_fetch_times_out(nc: Client) -> None:
    _, sub = await _pull(nc, "empty")
    with pytest.raises(TimeoutError):
        await fetch_lingering(sub, 10, timeout=0.2, window=0.05)


async def test_the_window_widens_while_fetches_bring_several_and_narrows_after_one(nc: Client) -> None:
    js, sub = await _pull(nc, "widening")
    linger = Linger(0.01, 0.03)
    # A fetch may hand over fewer messages than were stored (on a loaded machine the second can come after
    # the client stopped waiting), so each round checks the window against what its fetch brought, until
    # three fetches in a row brought several.
    expected, in_a_row = linger.window, 0
    for _ in range(100):
        await _publish(js, 2)
        several = len(await linger.fetch(sub, 10, timeout=5.0)) >= 2
        expected = min(0.03, expected * 2) if several else 0.01
        assert linger.window == expected  # doubled, held at the cap, back to the base after one
        in_a_row = in_a_row + 1 if several else 0
        if in_a_row == 3:
            break
    assert (in_a_row, linger.window) == (3, 0.03)
    while (await sub.consumer_info()).num_pending:  # what a short fetch left behind
        await linger.fetch(sub, 10, timeout=5.0)
    await _publish(js, 1)
    assert len(await linger.fetch(sub, 10, timeout=5.0)) == 1
    assert linger.window == 0.01


async def test_a_fetch_that_times_out_narrows_the_window(nc: Client) -> None:
    js, sub = await _pull(nc, "quiet")
    linger = Linger(0.01, 0.04)
    await _publish(js, 2)
    await linger.fetch(sub, 10, timeout=5.0)
    assert linger.window == 0.02
    with pytest.raises(TimeoutError):
        await linger.fetch(sub, 10, timeout=0.2)
    assert linger.window == 0.01


async def test_a_window_of_zero_never_lingers(nc: Client) -> None:
    js, sub = await _pull(nc, "eager")
    linger = Linger(0.0, 0.4)
    await _publish(js, 3)
    assert len(await linger.fetch(sub, 10, timeout=5.0)) == 3
    assert linger.window == 0.0
