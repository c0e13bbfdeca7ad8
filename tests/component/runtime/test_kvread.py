"""Batched KV reads answered on one reply subscription per reader (against a real nats-server)."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from schema import subjects
from services.runtime.errors import RetryableError
from services.runtime.kvread import KvReader, read_entries
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually

BUCKET = subjects.OBJECTS_BUCKET


async def test_concurrent_reads_on_one_reader_each_get_their_own_answer(objects: tuple[Client, KeyValue]) -> None:
    nc, kv = objects
    for group in range(20):
        for i in range(group + 1):
            await kv.put(f"g{group}.e{i}", f"{group}/{i}".encode())
    async with KvReader(nc) as reader:
        reads = await asyncio.gather(*(reader.entries(BUCKET, f"g{group}.>") for group in range(20)))
    for group, read in enumerate(reads):
        assert {key: entry.value for key, entry in read.entries.items()} == {
            f"g{group}.e{i}": f"{group}/{i}".encode() for i in range(group + 1)
        }


async def test_a_filter_with_more_keys_than_one_answer_holds_is_read_in_pages(objects: tuple[Client, KeyValue]) -> None:
    nc, kv = objects
    for i in range(1_100):
        await kv.put(f"many.e{i}", b"x")
    await kv.delete("many.e7")
    read = await read_entries(nc, BUCKET, "many.>")
    assert len(read.entries) == 1_100
    assert read.entries["many.e7"].value is None
    assert read.revision == max(entry.revision for entry in read.entries.values())


async def test_a_read_nobody_answers_gives_up_and_the_reader_reads_on(objects: tuple[Client, KeyValue]) -> None:
    nc, kv = objects
    await kv.put("a.b", b"1")
    silent = "silent"
    # Someone listens on the bucket's direct-get subject but never answers: no "no responders" status.
    listener = await nc.subscribe(subjects.direct_get_subject(subjects.kv_stream(silent)))
    async with KvReader(nc) as reader:
        with pytest.raises(RetryableError, match="got no answer"):
            await reader.entries(silent, ">", timeout=0.2)
        read = await reader.entries(BUCKET, "a.>")
    await listener.unsubscribe()
    assert read.entries["a.b"].value == b"1"


async def test_a_bucket_without_a_stream_is_a_retryable_error(objects: tuple[Client, KeyValue]) -> None:
    nc, _ = objects
    with pytest.raises(RetryableError, match="nowhere"):
        await read_entries(nc, "nowhere", ">")


async def test_a_reply_that_is_no_entry_fails_the_read_at_once(objects: tuple[Client, KeyValue]) -> None:
    nc, _ = objects
    impostor = "impostor"
    # Whoever answers on the bucket's direct-get subject answers with something that is no KV entry.

    async def answer(msg: Msg) -> None:
        await nc.publish(msg.reply, b"hello", headers={"Nats-Subject": "elsewhere"})

    responder = await nc.subscribe(subjects.direct_get_subject(subjects.kv_stream(impostor)), cb=answer)
    with pytest.raises(RetryableError, match="no entry"):
        await read_entries(nc, impostor, ">", timeout=30)
    await responder.unsubscribe()


async def test_a_reader_reads_on_after_the_server_restarted(
    objects: tuple[Client, KeyValue], nats_server: NatsServer
) -> None:
    nc, kv = objects
    await kv.put("a.b", b"1")
    async with KvReader(nc) as reader:
        assert (await reader.entries(BUCKET, "a.>")).entries["a.b"].value == b"1"
        nats_server.restart()

        async def read_after_reconnect() -> bytes | None:
            return (await reader.entries(BUCKET, "a.>", timeout=1.0)).entries["a.b"].value

        # The reply subscription is the connection's: renewed with it, not by the reader.
        assert await eventually(read_after_reconnect, timeout=60) == b"1"
