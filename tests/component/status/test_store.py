"""The store against real SQLite and PostgreSQL: idempotent inserts, resource rows, views, errors."""

from __future__ import annotations

import msgspec
import pytest

from schema.messages import Transition
from services.runtime.errors import PermanentError, RetryableError
from services.status.migrate import upgrade
from services.status.store import ResultRecord, StatusStore, create_engine
from tests.component.status.conftest import count
from tests.fixtures.postgres import execute_admin
from tests.unit.status.builders import at, lifecycle, result, transition


def rec(one: object, seq: int, trace_id: str = "") -> ResultRecord:
    return ResultRecord(result=one, stream_seq=seq, trace_id=trace_id)  # type: ignore[arg-type]


JOB_LIFE = [
    lifecycle("created", uid="u1", seconds=0),
    result(
        transition(
            "jobDeploymentStatus",
            "",
            "Initializing",
            uid="u1",
            seconds=1,
            rv="2",
            attributes={"rayClusterName": "demo-c1", "jobId": "demo-j1", "submissionMode": "K8sJobMode"},
        ),
        batch_id="b1",
    ),
    result(
        transition("jobDeploymentStatus", "Initializing", "Running", uid="u1", seconds=5, rv="3"),
        transition("jobStatus", "", "RUNNING", uid="u1", seconds=5, rv="3"),
        batch_id="b2",
    ),
    result(outcome="failed", error="boom", status_code=500, batch_id="b3", verb="emit_event"),
    result(transition("jobDeploymentStatus", "Running", "Complete", uid="u1", seconds=9, rv="4"), batch_id="b4"),
    lifecycle("deleted", uid="u1", seconds=30, rv="5"),
]


async def test_persist_is_idempotent_and_keeps_deleted_resources(store: StatusStore) -> None:
    records = [rec(one, seq) for seq, one in enumerate(JOB_LIFE, start=1)]
    first = await store.persist(records)
    assert (first.results, first.transitions) == (6, 6)
    again = await store.persist(records[::-1])  # redelivered, in another order
    assert (again.results, again.transitions) == (6, 0)
    assert await count(store, "commands") == 6
    assert await count(store, "transitions") == 6
    assert await count(store, "resources") == 1

    found = await store.find_resource(kind="RayJob", namespace="default", name="demo")
    assert found is not None
    row = found.resource
    assert (row.uid, row.status, row.first_seen, row.deleted_at, row.last_seq) == ("u1", "Complete", at(0), at(30), 6)
    assert found.rayjob is not None
    assert (found.rayjob.cluster_name, found.rayjob.job_id, found.rayjob.submission_mode) == (
        "demo-c1",
        "demo-j1",
        "K8sJobMode",
    )
    assert (found.rayjob.attempts, found.rayjob.started_at, found.rayjob.ended_at) == (1, at(1), at(9))
    history = await store.list_transitions("u1")
    assert [(t.field, t.to_value) for t in history] == [
        ("lifecycle", "created"),
        ("jobDeploymentStatus", "Initializing"),
        ("jobDeploymentStatus", "Running"),
        ("jobStatus", "RUNNING"),
        ("jobDeploymentStatus", "Complete"),
        ("lifecycle", "deleted"),
    ]
    assert history[1].attributes == {"rayClusterName": "demo-c1", "jobId": "demo-j1", "submissionMode": "K8sJobMode"}
    assert history[0].at.tzinfo is not None
    failed = await store.list_commands(outcome="failed")
    assert [(c.batch_id, c.error, c.status_code) for c in failed] == [("b3", "boom", 500)]


async def test_a_duplicate_decision_in_one_batch_is_stored_once(store: StatusStore) -> None:
    step = transition("state", "", "ready", kind="RayCluster", uid="c1", rv="7")
    one = result(step, batch_id="x", command_id="0")
    dup = result(step, batch_id="y", command_id="0")  # another decision confirming the same step
    stats = await store.persist([rec(one, 1, "t" * 32), rec(one, 2), rec(dup, 3)])
    assert stats.transitions == 1
    assert await count(store, "commands") == 2
    [stored] = await store.list_transitions("c1")
    assert (stored.stream_seq, stored.trace_id, stored.batch_id) == (1, "t" * 32, "x")


async def test_a_step_decided_again_before_its_effect_showed_is_stored_once(store: StatusStore) -> None:
    """The serve Service's create was still in flight at the next decision, whose status write (on a newer
    resourceVersion) carried its ``traffic`` step again. The field did not move in between, so the second
    is no step; a step back to a value the field held before, or another step into the same value, is."""

    def step(frm: str, to: str, *, field: str = "traffic", seconds: float, rv: str) -> Transition:
        return transition(field, frm, to, kind="RayService", uid="s1", seconds=seconds, rv=rv)

    await store.persist([rec(result(step("", "s-a", seconds=1, rv="3"), batch_id="p1"), 1)])
    stats = await store.persist(
        [
            rec(result(step("", "s-a", seconds=1.2, rv="4"), batch_id="p2"), 2),  # in another batch
            rec(result(step("", "s-a", seconds=1.4, rv="5"), batch_id="p3"), 3),
            rec(result(step("s-a", "s-b", seconds=9, rv="6"), batch_id="p4"), 4),
            rec(result(step("s-b", "s-a", seconds=20, rv="7"), batch_id="p5"), 5),  # back: a step
            rec(result(step("s-a", "", field="clusterDeleted", seconds=30, rv="8"), batch_id="p6"), 6),
            rec(result(step("s-b", "", field="clusterDeleted", seconds=31, rv="9"), batch_id="p7"), 7),
        ]
    )
    assert stats.transitions == 4
    rows = await store.list_transitions("s1")
    assert [(t.field, t.from_value, t.to_value, t.resource_version) for t in rows] == [
        ("traffic", "", "s-a", "3"),
        ("traffic", "s-a", "s-b", "6"),
        ("traffic", "s-b", "s-a", "7"),
        ("clusterDeleted", "s-a", "", "8"),
        ("clusterDeleted", "s-b", "", "9"),
    ]
    found = await store.find_resource(kind="RayService", namespace="default", name="demo")
    assert found is not None and found.resource.last_seq == 7


async def test_every_execution_of_a_command_is_a_row_and_a_redelivered_result_is_not(store: StatusStore) -> None:
    first = result(batch_id="b", command_id="create-head", verb="create_object", batch_seq=7, delivery=1)
    # the batch came back after its applier died: the command ran a second time
    rerun = result(batch_id="b", command_id="create-head", verb="create_object", batch_seq=7, delivery=2)
    rerun = msgspec.structs.replace(rerun, outcome="already_done")
    await store.persist([rec(first, 1), rec(rerun, 2)])
    await store.persist([rec(first, 1), rec(rerun, 2)])  # the same results again
    rows = await store.list_commands()
    assert [(c.batch_seq, c.delivery, c.outcome) for c in rows] == [(7, 1, "applied"), (7, 2, "already_done")]


async def test_latest_incarnation_is_the_last_created(store: StatusStore) -> None:
    await store.persist(
        [rec(lifecycle("created", uid="old", seconds=0), 1), rec(lifecycle("deleted", uid="old", seconds=10), 2)]
    )
    await store.persist([rec(lifecycle("created", uid="new", seconds=20), 3)])
    latest = await store.find_resource(kind="RayJob", namespace="default", name="demo")
    older = await store.find_resource(kind="RayJob", namespace="default", name="demo", uid="old")
    assert latest is not None and older is not None
    assert (latest.resource.uid, latest.resource.deleted_at) == ("new", None)
    assert (older.resource.uid, older.resource.deleted_at) == ("old", at(10))
    assert await store.find_resource(kind="RayJob", namespace="default", name="demo", uid="nope") is None
    assert await store.find_resource(kind="RayService", namespace="default", name="demo") is None
    deleted = [r.resource.uid for r in await store.list_resources(kind="RayJob")]
    assert deleted == ["old", "new"]


async def test_data_the_database_refuses_is_a_permanent_error(store: StatusStore) -> None:
    poison = result(status_code=2**63, batch_id="poison")  # fits the message, not a BIGINT
    with pytest.raises(PermanentError):
        await store.persist([rec(result(batch_id="fine"), 1), rec(poison, 2)])
    assert await count(store, "commands") == 0  # nothing of the failed transaction was kept


@pytest.mark.pg
async def test_a_database_refusing_new_connections_for_now_is_retryable_not_refused_data(pg_url: str) -> None:
    """A server that turns a new connection away (starting up, shutting down, not accepting connections)
    answers with an error asyncpg raises unwrapped: it is an outage to wait out, never data to dead-letter."""
    await upgrade(pg_url)
    store = StatusStore(create_engine(pg_url))
    name = pg_url.rsplit("/", 1)[1]
    records = [rec(one, seq) for seq, one in enumerate(JOB_LIFE, start=1)]
    try:
        await execute_admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        with pytest.raises(RetryableError, match="not currently accepting connections"):
            await store.persist(records)
        with pytest.raises(RetryableError, match="unreachable"):
            await store.ping()
        await execute_admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        assert (await store.persist(records)).results == len(records)
    finally:
        await store.close()
