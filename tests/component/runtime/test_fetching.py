"""Fetching one request at a time, and with a linger, against a real nats-server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from schema import subjects
from services.runtime.bus import flush_sent
from services.runtime.fetching import Linger, Puller, fetch_lingering
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually

STREAM = "LINGER"
SUBJECT = "linger.test"
NEVER = 600.0
"""A fetch's timeout that no test waits for: a fetch that returns has not waited for its expiry."""


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    await client.jetstream().add_stream(StreamConfig(name=STREAM, subjects=[SUBJECT]))
    try:
        yield client
    finally:
        await client.close()


async def _puller(nc: Client, durable: str) -> Puller:
    await nc.jetstream().add_consumer(STREAM, ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT))
    return Puller(nc, STREAM, durable)


async def _publish(nc: Client, *data: str) -> None:
    for item in data:
        await nc.jetstream().publish(SUBJECT, item.encode())


async def _waiting(nc: Client, durable: str) -> int:
    waiting: int = (await nc.jetstream().consumer_info(STREAM, durable)).num_waiting
    return waiting


def _data(msgs: list[Msg]) -> list[str]:
    return [m.data.decode() for m in msgs]


async def test_a_message_stored_while_a_fetch_waits_is_handed_over_at_once(nc: Client) -> None:
    puller = await _puller(nc, "waiting")
    fetching = asyncio.create_task(puller.fetch(10, timeout=NEVER))
    await eventually(lambda: _waiting(nc, "waiting"), timeout=60, message="the fetch's request waits")
    await _publish(nc, "a")
    assert _data(await asyncio.wait_for(fetching, timeout=60)) == ["a"]
    await _publish(nc, "b", "c")
    assert _data(await asyncio.wait_for(puller.fetch(10, timeout=NEVER), timeout=60)) == ["b", "c"]
    await puller.close()


async def test_a_late_status_neither_ends_a_fetch_nor_holds_its_message(nc: Client, nats_server: NatsServer) -> None:
    """A status meant for an earlier request (one its fetch stopped waiting for) comes while the next fetch
    waits: that fetch goes on waiting, and hands over the message stored after it at once."""
    puller = await _puller(nc, "late")
    requests: asyncio.Queue[Msg] = asyncio.Queue()
    spy = await nats.connect(nats_server.url)
    await spy.subscribe(subjects.pull_request_subject(STREAM, "late"), cb=requests.put)
    await flush_sent(spy)
    fetching = asyncio.create_task(puller.fetch(10, timeout=NEVER))
    request = await asyncio.wait_for(requests.get(), timeout=60)
    inbox = request.reply.rpartition(".")[0]
    for stale in ("404", "408"):
        await spy.publish(f"{inbox}.earlier", b"", headers={"Status": stale, "Description": "stale"})
    await flush_sent(spy)
    await _publish(nc, "a")
    assert _data(await asyncio.wait_for(fetching, timeout=60)) == ["a"]
    fetching = asyncio.create_task(puller.fetch(10, timeout=NEVER))
    await asyncio.wait_for(requests.get(), timeout=60)
    await _publish(nc, "b")
    assert _data(await asyncio.wait_for(fetching, timeout=60)) == ["b"]
    await spy.close()
    await puller.close()


async def test_the_request_of_a_cancelled_fetch_ends_before_the_next_and_loses_nothing(nc: Client) -> None:
    puller = await _puller(nc, "cancelled")
    fetching = asyncio.create_task(puller.fetch(10, timeout=NEVER))
    await eventually(lambda: _waiting(nc, "cancelled"), timeout=60, message="the fetch's request waits")
    fetching.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fetching
    fetching = asyncio.create_task(puller.fetch(10, timeout=NEVER))
    await _publish(nc, "a")
    assert _data(await asyncio.wait_for(fetching, timeout=60)) == ["a"]
    assert await _waiting(nc, "cancelled") == 0  # the cancelled fetch's request took it, and ended
    fetching = asyncio.create_task(puller.fetch(10, timeout=NEVER))
    await eventually(lambda: _waiting(nc, "cancelled"), timeout=60, message="the fetch's request waits")
    await _publish(nc, "c")
    assert _data(await asyncio.wait_for(fetching, timeout=60)) == ["c"]
    await puller.close()


async def test_a_fetch_takes_its_batch_and_leaves_the_rest_stored(nc: Client) -> None:
    puller = await _puller(nc, "batch")
    await _publish(nc, *"abcde")
    assert _data(await puller.fetch(2, timeout=NEVER)) == ["a", "b"]
    assert _data(await puller.fetch(10, timeout=NEVER)) == ["c", "d", "e"]
    with pytest.raises(TimeoutError):
        await puller.fetch(10, timeout=0.2)
    await puller.close()


async def test_nothing_stored_times_out(nc: Client) -> None:
    puller = await _puller(nc, "empty")
    with pytest.raises(TimeoutError):
        await puller.fetch(10, timeout=0.2)
    await puller.close()


async def test_a_consumer_that_does_not_exist_is_an_error_not_a_timeout(nc: Client) -> None:
    puller = Puller(nc, STREAM, "absent")
    with pytest.raises(nats.errors.Error) as raised:
        await puller.fetch(10, timeout=NEVER)
    assert not isinstance(raised.value, TimeoutError)
    await puller.close()


async def test_the_request_names_its_batch_and_expiry(nc: Client) -> None:
    """What the server is asked for: the batch, ``no_wait`` and the fetch's timeout in nanoseconds."""
    puller = await _puller(nc, "asked")
    requests: asyncio.Queue[Msg] = asyncio.Queue()
    await nc.subscribe(subjects.pull_request_subject(STREAM, "asked"), cb=requests.put)
    with pytest.raises(TimeoutError):
        await puller.fetch(7, timeout=0.2)
    assert json.loads((await requests.get()).data) == {"batch": 7, "no_wait": True, "expires": 200_000_000}
    await puller.close()


async def test_what_is_stored_within_the_window_joins_the_batch(nc: Client) -> None:
    puller = await _puller(nc, "lingering")
    window_open = asyncio.Event()
    published = asyncio.Event()

    async def linger(window: float) -> None:
        assert window == 3.0
        window_open.set()
        await published.wait()

    await _publish(nc, "0", "1")
    fetching = asyncio.create_task(fetch_lingering(puller, 10, timeout=5.0, window=3.0, linger=linger))
    await asyncio.wait_for(window_open.wait(), timeout=60)
    await _publish(nc, "2", "3", "4")
    published.set()
    assert _data(await fetching) == ["0", "1", "2", "3", "4"]
    await puller.close()


async def test_a_lone_message_is_returned_without_the_window(nc: Client) -> None:
    puller = await _puller(nc, "alone")
    await _publish(nc, "0")
    msgs = await asyncio.wait_for(fetch_lingering(puller, 10, timeout=5.0, window=NEVER), timeout=60)
    assert _data(msgs) == ["0"]
    await puller.close()


async def test_the_window_widens_while_fetches_bring_several_and_narrows_after_one(nc: Client) -> None:
    puller = await _puller(nc, "widening")
    linger = Linger(0.01, 0.03)
    for window in (0.02, 0.03, 0.03):  # doubled, then held at the cap
        await _publish(nc, "a", "b")
        assert len(await linger.fetch(puller, 10, timeout=5.0)) == 2
        assert linger.window == window
    await _publish(nc, "c")
    assert len(await linger.fetch(puller, 10, timeout=5.0)) == 1
    assert linger.window == 0.01
    await puller.close()


async def test_after_a_fetch_of_several_a_lone_message_waits_for_the_window(nc: Client) -> None:
    puller = await _puller(nc, "thinning")
    windows: list[float] = []
    publish_in_window: list[str] = []

    async def linger(window: float) -> None:
        windows.append(window)
        await _publish(nc, *publish_in_window)

    lingering = Linger(0.01, 0.04, linger=linger)
    await _publish(nc, "a", "b")
    assert _data(await lingering.fetch(puller, 10, timeout=5.0)) == ["a", "b"]
    await _publish(nc, "c")
    publish_in_window[:] = ["d", "e"]
    assert _data(await lingering.fetch(puller, 10, timeout=5.0)) == ["c", "d", "e"]
    assert windows == [0.01, 0.02] and lingering.window == 0.04
    publish_in_window[:] = []
    await _publish(nc, "f")
    assert _data(await lingering.fetch(puller, 10, timeout=5.0)) == ["f"]
    assert windows == [0.01, 0.02, 0.04] and lingering.window == 0.01
    await _publish(nc, "g")
    assert _data(await lingering.fetch(puller, 10, timeout=5.0)) == ["g"]
    assert windows == [0.01, 0.02, 0.04], "a lone message at the base window does not linger"
    await puller.close()


async def test_a_fetch_that_times_out_narrows_the_window(nc: Client) -> None:
    puller = await _puller(nc, "quiet")
    linger = Linger(0.01, 0.04)
    await _publish(nc, "a", "b")
    await linger.fetch(puller, 10, timeout=5.0)
    assert linger.window == 0.02
    with pytest.raises(TimeoutError):
        await linger.fetch(puller, 10, timeout=0.2)
    assert linger.window == 0.01
    await puller.close()


async def test_a_window_of_zero_never_lingers(nc: Client) -> None:
    puller = await _puller(nc, "eager")
    linger = Linger(0.0, 0.4)
    await _publish(nc, "a", "b", "c")
    assert len(await linger.fetch(puller, 10, timeout=5.0)) == 3
    assert linger.window == 0.0
    await puller.close()
