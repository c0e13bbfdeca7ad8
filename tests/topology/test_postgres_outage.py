"""PostgreSQL restarted under the status service during a burst, and unreachable for 30 s meanwhile.

The whole stack runs as processes (``tests/e2e/faults.py``'s), the status service on a private PostgreSQL
(``tests/fixtures/pgserver.py``: the machine's server is shared by other tests). While the database is
down the status service stays up, says it is not ready, and keeps its batch unacked; once the database
is back it is ready again and drains. Then every result on RAYBUS_RESULTS is in the audit table exactly
once and every transition they carry in the transitions table exactly once (up to the last result on
the stream when compared: the stack keeps running).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import nats
import pytest
import sqlalchemy as sa
from kubernetes import client
from sqlalchemy.ext.asyncio import create_async_engine

from schema import codec, subjects
from tests.e2e.clusters import small_cluster
from tests.e2e.faults import GROUP, NAMESPACE, PLURAL, VERSION, WORKERS, converged, drained, fault_stack
from tests.fixtures.pgserver import PrivatePostgres
from tests.fixtures.processes import wait
from tests.helpers import stored_messages

OUTAGE = 30.0
"""Seconds the database stays down (the scenario, not a bound on anything)."""
CLUSTERS = 30

CommandKey = tuple[str, str, int, int]
TransitionKey = tuple[str, str, str, str, str]


async def on_the_bus(url: str) -> tuple[int, list[CommandKey], list[TransitionKey]]:
    """The last sequence of RAYBUS_RESULTS, and the audit and transition keys of every result up to it."""
    nc = await nats.connect(url)
    try:
        commands: list[CommandKey] = []
        transitions: list[TransitionKey] = []
        last = 0
        for msg in await stored_messages(nc.jetstream(), subjects.RESULTS_STREAM):
            last = max(last, msg.metadata.sequence.stream)
            for result in codec.decode_results(msg.data):
                commands.append((result.batch_id, result.command_id, result.batch_seq, result.delivery))
                transitions += [
                    (t.uid, t.field, t.from_value, t.to_value, t.resource_version) for t in result.transitions
                ]
        return last, commands, transitions
    finally:
        await nc.close()


async def acked_through(url: str) -> int:
    """The stream sequence up to which the status service acknowledged every result."""
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().consumer_info(subjects.RESULTS_STREAM, subjects.STATUS_CONSUMER)
        return int(info.ack_floor.stream_seq or 0)
    finally:
        await nc.close()


async def waiting_for_status(url: str) -> int:
    """Results the status service has not acknowledged yet."""
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().consumer_info(subjects.RESULTS_STREAM, subjects.STATUS_CONSUMER)
        return int(info.num_pending or 0) + int(info.num_ack_pending or 0)
    finally:
        await nc.close()


async def in_the_database(url: str, last: int) -> tuple[list[CommandKey], list[TransitionKey]]:
    """The audit and transition keys stored from results up to stream sequence ``last``."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            commands = await conn.execute(
                sa.text("SELECT batch_id, command_id, batch_seq, delivery FROM commands WHERE stream_seq <= :last"),
                {"last": last},
            )
            transitions = await conn.execute(
                sa.text(
                    "SELECT uid, field, from_value, to_value, resource_version FROM transitions"
                    " WHERE stream_seq <= :last"
                ),
                {"last": last},
            )
            return [tuple(r) for r in commands], [tuple(r) for r in transitions]
    finally:
        await engine.dispose()


@pytest.mark.timeout(900)
def test_a_postgres_restart_during_a_burst_loses_and_doubles_no_row(
    tmp_path: Path, private_postgres: PrivatePostgres
) -> None:
    with fault_stack(tmp_path, db_url=private_postgres.url) as stack, stack.api() as api:
        status = stack.services["status"]
        custom = client.CustomObjectsApi(api)
        expected = {}
        for index in range(CLUSTERS):
            name = f"pg-{index:03d}"
            body = small_cluster(name, workers=WORKERS)
            custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)
            expected[name] = 1 + WORKERS
            if index == CLUSTERS // 3:
                private_postgres.stop()
        wait(lambda: not status.answers("readyz"), "the status service says it is not ready", 60, stack)
        back_at = time.monotonic() + OUTAGE
        while time.monotonic() < back_at:  # the outage lasts; the service must live through it
            stack.check()
            assert status.answers("healthz") and not status.answers("readyz")
            time.sleep(1.0)
        assert asyncio.run(waiting_for_status(stack.nats.url)) > 0  # the outage held results back
        private_postgres.start()
        wait(lambda: status.answers("readyz"), "the status service ready again", 120, stack)
        wait(lambda: converged(api, expected), "every cluster ready", 300, stack)
        bus_url = stack.nats.url
        wait(lambda: asyncio.run(drained(bus_url, subjects.DEFAULT_PARTITIONS)), "every consumer drained", 300, stack)
        # Results keep coming while the stack runs (status updates, probes): compare up to one sequence.
        last, bus_commands, bus_transitions = asyncio.run(on_the_bus(bus_url))
        wait(lambda: asyncio.run(acked_through(bus_url)) >= last, "every result so far acknowledged", 300, stack)
        db_commands, db_transitions = asyncio.run(in_the_database(private_postgres.url, last))
    assert len(set(bus_commands)) == len(bus_commands) and bus_commands
    lost, extra = set(bus_commands) - set(db_commands), set(db_commands) - set(bus_commands)
    assert (lost, extra, len(db_commands)) == (set(), set(), len(set(db_commands))), (lost, extra)
    assert sorted(db_transitions) == sorted(set(bus_transitions)) and db_transitions
