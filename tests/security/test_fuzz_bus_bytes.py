"""Hypothesis-drawn bytes on every consumed subject of one key (events, commands, results): no stage
stops, every message the codec refuses is in the dead-letter stream, and the key still reconciles."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schema import codec, subjects
from schema.keys import ReconcileKey
from schema.messages import CommandBatch, CommandResult, ResultBatch, TimerTick
from tests.e2e.clusters import small_cluster
from tests.e2e.pipeline import Pipeline, running_pipeline
from tests.e2e.test_invariants import all_ready, create
from tests.helpers import eventually, stored_messages, work_consumers
from tests.security.test_hostile_messages import dead_letters

pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)]

KEY = ReconcileKey(kind="RayCluster", namespace="default", name="fuzzed")
EXAMPLES = 40
"""Payloads per subject (drawn once per test run: each is a message through the real pipeline)."""

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _valid_messages() -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    messages: list[msgspec.Struct] = [
        TimerTick(key=KEY, due_at=now),
        CommandBatch(id="fuzz", key=KEY, issued_at=now, commands=()),
        CommandResult(
            batch_id="fuzz", command_id="c", key=KEY, verb="emit_event", target="t", outcome="applied", at=now
        ),
        ResultBatch(
            results=(
                CommandResult(
                    batch_id="fuzz", command_id="c", key=KEY, verb="emit_event", target="t", outcome="applied", at=now
                ),
            )
        ),
    ]
    return [msgspec.json.decode(codec.encode(m)) for m in messages]


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    """A well-formed message of some kind with one field replaced (or added) by arbitrary JSON."""
    message = dict(draw(st.sampled_from(_valid_messages())))
    field = draw(st.sampled_from([*message, "extra"]))
    message[field] = draw(_json_values)
    return msgspec.json.encode(message)


def _nested(depth: int, opener: bytes, closer: bytes) -> bytes:
    return opener * depth + closer * depth


payloads = st.one_of(
    st.binary(max_size=300),
    st.builds(_nested, st.integers(1, 3000), st.sampled_from([b"[", b'{"a":[']), st.sampled_from([b"]", b"]}"])),
    _json_values.map(msgspec.json.encode),
    _mutated(),
)


def draw_payloads(count: int) -> list[bytes]:
    """``count`` payloads drawn by hypothesis (its shrinking does not apply: a run is one pipeline)."""
    drawn: list[bytes] = []

    @settings(max_examples=count, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(payloads)
    def collect(payload: bytes) -> None:
        drawn.append(payload)

    collect()
    return drawn


def refused(decode: Callable[[bytes], Any], payload: bytes) -> bool:
    try:
        decoded = decode(payload)
    except Exception:
        return True
    return getattr(decoded, "key", KEY) != KEY


async def drained(p: Pipeline) -> bool:
    nc = await p.nc()
    try:
        js = nc.jetstream()
        consumers = [await js.consumer_info(s, c) for s, c in work_consumers(p.settings.bus.partitions)]
        return all(c.num_pending == 0 and c.num_ack_pending == 0 for c in consumers)
    finally:
        await nc.close()


async def test_arbitrary_bytes_on_every_consumed_subject(tmp_path: Path, db_url: str) -> None:
    targets = [
        (subjects.EVENTS_STREAM, subjects.events_subject(KEY), codec.decode_input),
        (subjects.COMMANDS_STREAM, subjects.command_subject(KEY), codec.decode_batch),
        (subjects.RESULTS_STREAM, subjects.result_subject(KEY), codec.decode_results),
    ]
    async with running_pipeline(tmp_path, db_url=db_url) as p:
        expected: dict[str, set[int]] = {}
        nc = await p.nc()
        try:
            js = nc.jetstream()
            for stream, subject, decode in targets:
                expected[stream] = set()
                for payload in draw_payloads(EXAMPLES):
                    ack = await js.publish(subject, payload)
                    if refused(decode, payload):
                        expected[stream].add(int(ack.seq))
        finally:
            await nc.close()

        async def settled() -> bool:
            p.check()
            return await drained(p)

        await eventually(settled, timeout=120, message="the stages did not consume every fuzzed message")
        for stream, sequences in expected.items():
            parked = {letter.sequence for letter in await dead_letters(p, stream)}
            assert sequences <= parked, f"{stream}: refused but not dead-lettered: {sorted(sequences - parked)}"
        await asyncio.to_thread(create, p, small_cluster(KEY.name))
        await all_ready(p, {KEY.name})
        nc = await p.nc()
        try:
            assert await stored_messages(nc.jetstream(), subjects.RESULTS_STREAM, subjects.result_subject(KEY))
        finally:
            await nc.close()
        p.check()
