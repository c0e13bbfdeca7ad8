"""JetStream publishes acknowledged on one reply subscription, against a real nats-server: the same
answers and errors as nats-py's own publish."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from nats.js.api import StreamConfig
from nats.js.errors import APIError, BadRequestError, NoStreamResponseError

from services.runtime.bus import flush_sent
from services.runtime.publishing import AckedJetStream
from tests.fixtures.nats import NatsServer

STREAM = "PUBLISHING"
SUBJECT = "publishing.test"


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    await client.jetstream().add_stream(StreamConfig(name=STREAM, subjects=[f"{SUBJECT}.>"]))
    try:
        yield client
    finally:
        await client.close()


async def test_every_publish_is_answered_under_one_inbox(nc: Client, nats_server: NatsServer) -> None:
    spy = await nats.connect(nats_server.url)
    replies: list[str] = []
    seen = await spy.subscribe(f"{SUBJECT}.spied.>")
    await flush_sent(spy)
    js = AckedJetStream(nc)
    await asyncio.gather(*(js.publish(f"{SUBJECT}.spied.{i}", b"x") for i in range(20)))
    for _ in range(20):
        replies.append((await seen.next_msg(timeout=60)).reply)
    await spy.close()
    prefixes = {reply.rsplit(".", 1)[0] for reply in replies}
    assert len(prefixes) == 1 and len(set(replies)) == 20


async def test_concurrent_publishes_each_get_their_own_acknowledgement(nc: Client) -> None:
    js = AckedJetStream(nc)
    acks = await asyncio.gather(*(js.publish(f"{SUBJECT}.{i}", str(i).encode()) for i in range(200)))
    assert {a.stream for a in acks} == {STREAM}
    assert sorted(a.seq for a in acks) == list(range(1, 201))
    for i, ack in enumerate(acks):
        stored = await nc.jetstream().get_msg(STREAM, ack.seq)
        assert stored.subject == f"{SUBJECT}.{i}" and stored.data == str(i).encode()


async def test_a_repeated_message_id_is_acknowledged_as_a_duplicate(nc: Client) -> None:
    js = AckedJetStream(nc)
    first = await js.publish(f"{SUBJECT}.dup", b"a", headers={"Nats-Msg-Id": "one"})
    again = await js.publish(f"{SUBJECT}.dup", b"a", headers={"Nats-Msg-Id": "one"})
    assert not first.duplicate
    assert again.duplicate and again.seq == first.seq


async def test_a_subject_no_stream_stores_raises_no_stream_response(nc: Client) -> None:
    with pytest.raises(NoStreamResponseError):
        await AckedJetStream(nc).publish("nowhere.stored", b"x")


async def test_a_refused_expectation_raises_the_stream_s_error(nc: Client) -> None:
    js = AckedJetStream(nc)
    await js.publish(f"{SUBJECT}.seq", b"a")
    with pytest.raises(BadRequestError) as refused:
        await js.publish(f"{SUBJECT}.seq", b"b", headers={"Nats-Expected-Last-Subject-Sequence": "0"})
    assert refused.value.err_code == 10071  # wrong last sequence
    with pytest.raises(APIError):
        await js.publish(f"{SUBJECT}.seq", b"c", stream="ANOTHER")


async def test_no_acknowledgement_raises_a_timeout(nc: Client) -> None:
    # A plain subscriber is a responder that never answers: no 503, no acknowledgement.
    await nc.subscribe("silent.subject")
    js = AckedJetStream(nc)
    with pytest.raises(nats.errors.TimeoutError):
        await js.publish("silent.subject", b"x", timeout=0.05)
    ack = await js.publish(f"{SUBJECT}.after", b"y")
    assert ack.stream == STREAM
