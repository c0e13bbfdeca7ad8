"""The status service end to end on a real nats-server and database: results in, rows out, acks only
after commit (invariant 5), dead letters for garbage, a clear failure without a database."""

from __future__ import annotations

import asyncio
import threading

import aiohttp
import pytest
from nats.aio.client import Client

from schema import codec, subjects
from schema.keys import ReconcileKey
from services.runtime.errors import RetryableError
from services.runtime.health import HealthServer
from services.runtime.settings import RaybusSettings, StatusSettings
from services.status.service import run_status
from services.status.store import StatusStore
from tests.component.status.conftest import StatusRunner, count, publish_results
from tests.helpers import eventually
from tests.unit.status.builders import lifecycle, result, transition

KEY = ReconcileKey(kind="RayJob", namespace="default", name="demo")


async def settled(nc: Client) -> bool:
    """Every result was delivered and acked."""
    info = await nc.jetstream().consumer_info(subjects.RESULTS_STREAM, subjects.STATUS_CONSUMER)
    return bool(info.num_pending == 0 and info.num_ack_pending == 0)


async def test_results_become_rows_once_and_outlive_the_resource(
    runner: StatusRunner, nc: Client, store: StatusStore
) -> None:
    js = nc.jetstream()
    running = result(
        transition("jobDeploymentStatus", "Initializing", "Running", uid="u1", seconds=2, rv="3"), batch_id="b2"
    )
    results = [
        lifecycle("created", uid="u1"),
        result(transition("jobDeploymentStatus", "", "Initializing", uid="u1", seconds=1, rv="2"), batch_id="b1"),
        running,
        running,  # the same message twice
        result(batch_id="b3", verb="create_object", outcome="already_done"),
        lifecycle("deleted", uid="u1", seconds=9, rv="4"),
    ]
    await publish_results(js, results)
    await runner.start()
    await eventually(lambda: settled(nc), message="all results acked")
    assert await count(store, "commands") == 5
    assert await count(store, "transitions") == 4

    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{runner.url}/v1/rayjobs/default/demo/transitions") as response,
    ):
        assert response.status == 200
        body = await response.json()
    assert body["resource"]["deleted_at"] is not None
    assert [t["to_value"] for t in body["transitions"]] == ["created", "Initializing", "Running", "deleted"]

    # a restarted service sees nothing new: everything was acked after its commit
    await runner.stop()
    await runner.start()
    await publish_results(js, [running])  # and a late duplicate is still absorbed
    await eventually(lambda: settled(nc), message="late duplicate acked")
    assert await count(store, "transitions") == 4


async def test_garbage_is_dead_lettered_and_does_not_block(
    runner: StatusRunner, nc: Client, store: StatusStore
) -> None:
    js = nc.jetstream()
    subject = subjects.result_subject(KEY)
    await js.publish(subject, b"\x00 definitely not json")
    await js.publish(subject, b'{"type": "command_batch", "id": "x"}')
    await publish_results(js, [result(transition("state", "", "ready", uid=""), batch_id="no-uid")])
    await publish_results(js, [result(batch_id=f"good-{i}") for i in range(3)])
    await runner.start()
    await eventually(lambda: settled(nc), message="all results acked")
    assert await count(store, "commands") == 3

    dlq = await js.pull_subscribe(
        subjects.deadletter_subject(subjects.RESULTS_STREAM), stream=subjects.DEADLETTER_STREAM
    )
    letters = [codec.decode_deadletter(m.data) for m in await dlq.fetch(3, timeout=5)]
    assert [(d.stream, d.subject, d.sequence) for d in letters] == [
        (subjects.RESULTS_STREAM, subject, 1),
        (subjects.RESULTS_STREAM, subject, 2),
        (subjects.RESULTS_STREAM, subject, 3),
    ]
    assert [d.error.split(":")[0] for d in letters] == ["not command results"] * 2 + ["a transition of '0' has no uid"]
    assert letters[0].payload == b"\x00 definitely not json"
    await dlq.unsubscribe()


# "kill" simulates a crash by cancelling the service wherever it is: a database connection cancelled
# mid-query is abandoned (as a crashed process abandons it) and its socket warns when collected. That
# warning is expected here and only here.
_ABANDONED_SOCKET = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning",
    "ignore:unclosed <socket.socket:ResourceWarning",
)


@pytest.mark.parametrize("how", ["stop", pytest.param("kill", marks=_ABANDONED_SOCKET)])
async def test_a_restart_during_a_burst_loses_and_duplicates_nothing(
    runner: StatusRunner, nc: Client, store: StatusStore, how: str
) -> None:
    total = 300
    burst = [
        result(
            transition(
                "state", "", f"s{i}", kind="RayCluster", uid=f"c{i % 7}", name=f"c{i % 7}", rv=str(i), seconds=i
            ),
            batch_id=f"b{i}",
        )
        for i in range(total)
    ]
    js = nc.jetstream()

    async def publish() -> None:
        for i in range(0, total, 20):
            await publish_results(js, burst[i : i + 20])
            await asyncio.sleep(0)

    publisher = asyncio.create_task(publish())
    await runner.start()
    await eventually(lambda: _at_least(store, 40), message="some results persisted")
    await (runner.stop() if how == "stop" else runner.kill())
    await runner.start()
    await publisher
    await eventually(lambda: settled(nc), message="all results acked after the restart")
    assert await count(store, "commands") == total
    assert await count(store, "transitions") == total
    assert await count(store, "resources") == 7


async def _at_least(store: StatusStore, n: int) -> bool:
    return await count(store, "commands") >= n


async def test_trace_id_comes_from_the_result_or_its_headers(
    runner: StatusRunner, nc: Client, store: StatusStore
) -> None:
    carried = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = {"traceparent": f"00-{carried}-00f067aa0ba902b7-01"}
    js = nc.jetstream()
    await publish_results(js, [result(batch_id="from-headers")], headers=headers)
    await publish_results(js, [result(batch_id="own", trace_id="a" * 32)], headers=headers)
    await runner.start()
    await eventually(lambda: settled(nc))
    rows = {c.batch_id: c.trace_id for c in await store.list_commands()}
    assert rows == {"from-headers": carried, "own": "a" * 32}


@pytest.mark.parametrize(
    "bad_url",
    [
        pytest.param("postgresql+asyncpg://raybus:s3cret@127.0.0.1:1/raybus", id="postgresql-port-closed"),
        pytest.param("sqlite+aiosqlite:////proc/version/raybus.db", id="sqlite-path-impossible"),
    ],
)
async def test_an_unreachable_database_fails_start_clearly(bad_url: str) -> None:
    settings = RaybusSettings(status=StatusSettings(db_url=bad_url))
    async with asyncio.timeout(15):
        with pytest.raises(RetryableError, match="unreachable") as raised:
            await run_status(settings, asyncio.Event(), HealthServer(host="127.0.0.1", port=0))
    assert "s3cret" not in str(raised.value)
    # aiosqlite (0.22) queues the close of a connection that failed to open without awaiting it; let its
    # worker thread finish while this test's event loop still runs, or it reports into the next test.
    await eventually(lambda: not any("_connection_worker_thread" in t.name for t in threading.enumerate()))
