"""Hostile bus messages against the running pipeline: whatever one message holds, it ends in the
dead-letter stream (or, for a command that cannot be executed, in a ``failed`` result), and every stage
goes on, including for the key the message named."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from schema import subjects
from schema.bounds import MAX_NESTING
from schema.codec import decode_deadletter, decode_results, encode
from schema.keys import ReconcileKey
from schema.messages import CommandBatch, CreateObject, DeadLetter, ObjectRef
from tests.e2e.clusters import small_cluster
from tests.e2e.pipeline import Pipeline, running_pipeline
from tests.e2e.test_invariants import all_ready, create
from tests.helpers import eventually, stored_messages

pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)]

NESTED_10K = b'{"a":' * 2000 + b"1" + b"}" * 2000
"""10 KB of nested JSON: deeper than msgspec (and Python) can decode."""
NESTED_SHALLOW_ENOUGH_FOR_MSGSPEC = b"[" * 900 + b"]" * 900
"""Decodes, and breaks whatever walks it afterwards."""


def key_of(name: str) -> ReconcileKey:
    return ReconcileKey(kind="RayCluster", namespace="default", name=name)


async def publish_raw(p: Pipeline, subject: str, payload: bytes) -> int:
    nc = await p.nc()
    try:
        return int((await nc.jetstream().publish(subject, payload)).seq)
    finally:
        await nc.close()


async def dead_letters(p: Pipeline, stream: str) -> list[DeadLetter]:
    nc = await p.nc()
    try:
        msgs = await stored_messages(nc.jetstream(), subjects.DEADLETTER_STREAM, subjects.deadletter_subject(stream))
        return [decode_deadletter(m.data) for m in msgs]
    finally:
        await nc.close()


async def letter_for(p: Pipeline, stream: str, sequence: int) -> DeadLetter:
    """Wait for the dead letter of ``stream``'s message ``sequence``."""
    found: list[DeadLetter] = []

    async def parked() -> bool:
        p.check()
        found[:] = [d for d in await dead_letters(p, stream) if d.sequence == sequence]
        return bool(found)

    await eventually(parked, timeout=60, message=f"{stream} #{sequence} was never dead-lettered")
    return found[0]


def batch_of(key: ReconcileKey, *commands: Any) -> CommandBatch:
    return CommandBatch(id=f"forged-{uuid.uuid4().hex}", key=key, issued_at=datetime.now(UTC), commands=commands)


async def test_deeply_nested_event_is_dead_lettered_and_the_key_still_reconciles(tmp_path: Path, db_url: str) -> None:
    async with running_pipeline(tmp_path, db_url=db_url) as p:
        key = key_of("after-deep-event")
        deep = await publish_raw(p, subjects.events_subject(key), NESTED_10K)
        walks = await publish_raw(p, subjects.events_subject(key), NESTED_SHALLOW_ENOUGH_FOR_MSGSPEC)
        for sequence in (deep, walks):
            letter = await letter_for(p, subjects.EVENTS_STREAM, sequence)
            assert f"nested deeper than {MAX_NESTING} levels" in letter.error
        await asyncio.to_thread(create, p, small_cluster(key.name))
        await all_ready(p, {key.name})
        p.check()


@pytest.mark.parametrize(
    ("stream", "subject_of", "reason"),
    [
        (subjects.COMMANDS_STREAM, subjects.command_subject, "malformed command batch: TooComplex"),
        (subjects.RESULTS_STREAM, subjects.result_subject, "not command results: TooComplex"),
    ],
)
async def test_deeply_nested_batch_or_result_is_dead_lettered_and_its_stage_goes_on(
    tmp_path: Path, db_url: str, stream: str, subject_of: Callable[[ReconcileKey], str], reason: str
) -> None:
    async with running_pipeline(tmp_path, db_url=db_url) as p:
        key = key_of("after-deep-message")
        sequence = await publish_raw(p, subject_of(key), NESTED_10K)
        letter = await letter_for(p, stream, sequence)
        assert letter.error.startswith(reason)
        await asyncio.to_thread(create, p, small_cluster(key.name))
        await all_ready(p, {key.name})
        p.check()


async def test_a_command_that_raises_fails_and_the_keys_later_batches_are_applied(tmp_path: Path, db_url: str) -> None:
    async with running_pipeline(tmp_path, db_url=db_url) as p:
        key = key_of("after-bad-command")
        target = ObjectRef(api_version="v1", kind="ConfigMap", namespace="default", name=key.name)
        poison = batch_of(key, CreateObject(id="poison", target=target, body={"metadata": 7}))
        await publish_raw(p, subjects.command_subject(key), encode(poison))
        nc = await p.nc()
        try:
            results: list[Any] = []

            async def reported() -> bool:
                p.check()
                msgs = await stored_messages(nc.jetstream(), subjects.RESULTS_STREAM, subjects.result_subject(key))
                results[:] = [r for m in msgs for r in decode_results(m.data) if r.batch_id == poison.id]
                return bool(results)

            await eventually(reported, timeout=60, message="the bad command got no result")
        finally:
            await nc.close()
        assert results[0].outcome != "applied"
        assert results[0].error
        # The key's worker in the applier survived: the cluster of that very key comes up.
        await asyncio.to_thread(create, p, small_cluster(key.name))
        await all_ready(p, {key.name})
        p.check()
