"""The RayService view (migration 0003) through the store, the history API and ``raybus history``, and
its backfill from RayService history recorded before the view existed."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import jsonschema
import pytest
import sqlalchemy as sa
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from schema.messages import CommandResult
from services.status import store as store_module
from services.status.metrics import ResourceMetrics
from services.status.migrate import upgrade
from services.status.store import StatusStore, create_engine
from tests.component.status.conftest import history_api, records
from tests.component.status.test_api import get
from tests.component.status.test_history_cli import run
from tests.unit.status.builders import at, lifecycle, result, transition


def step(field: str, frm: str, to: str, /, *, seconds: float, rv: str, reason: str = "", **attributes: str) -> Any:
    return transition(
        field,
        frm,
        to,
        kind="RayService",
        uid="rs-1",
        name="svc",
        seconds=seconds,
        rv=rv,
        reason=reason,
        attributes=attributes,
    )


def upgrade_history() -> list[CommandResult]:
    """A RayService whose first cluster becomes ready, then a blue/green upgrade, then deletion."""
    return [
        lifecycle("created", uid="rs-1", kind="RayService", name="svc"),
        result(
            step("condition/Ready", "", "False", seconds=1, rv="2", reason="Initializing"),
            step("pendingCluster", "", "svc-aaaaa", seconds=1, rv="2", reason="NewClusterPrepared", activeCluster=""),
            batch_id="p1",
        ),
        result(
            step("traffic", "", "svc-aaaaa", seconds=5, rv="3", reason="ServiceSelectorSwitched", to="svc-aaaaa"),
            step("activeCluster", "", "svc-aaaaa", seconds=5, rv="3", reason="PendingClusterPromoted"),
            step("serviceStatus", "", "Running", seconds=5, rv="3", reason="NonZeroServeEndpoints"),
            step("condition/Ready", "False", "True", seconds=5, rv="3", reason="NonZeroServeEndpoints"),
            batch_id="p2",
        ),
        result(
            step("pendingCluster", "", "svc-bbbbb", seconds=20, rv="4", activeCluster="svc-aaaaa"),
            batch_id="p3",
        ),
        result(
            step("traffic", "svc-aaaaa", "svc-bbbbb", seconds=32, rv="5", reason="ServiceSelectorSwitched"),
            step("activeCluster", "svc-aaaaa", "svc-bbbbb", seconds=32, rv="5", reason="PendingClusterPromoted"),
            batch_id="p4",
        ),
        result(step("clusterDeleted", "svc-aaaaa", "", seconds=40, rv="6", reason="DanglingCluster"), batch_id="p5"),
        lifecycle("deleted", uid="rs-1", kind="RayService", name="svc", seconds=50, rv="7"),
    ]


@pytest.fixture
async def base(store: StatusStore) -> AsyncIterator[str]:
    async with history_api(store, upgrade_history()) as url:
        yield url


EXPECTED_VIEW = {
    "service_status": "Running",
    "ready_reason": "NonZeroServeEndpoints",
    "active_cluster": "svc-bbbbb",
    "pending_cluster": "",
    "serving_cluster": "svc-bbbbb",
    "pending_traffic_percent": None,
    "rollback_status": "",
    "clusters_created": 2,
    "clusters_deleted": 1,
    "upgrades": 1,
    "rollbacks": 0,
    "ready_at": "2026-01-01T12:00:05Z",
    "upgrade_started_at": "2026-01-01T12:00:20Z",
    "upgraded_at": "2026-01-01T12:00:32Z",
    "last_upgrade_seconds": 12.0,
}


EXPECTED_TIMES = {"upgraded_at": at(32)}


async def test_the_view_is_served_with_the_resource(base: str) -> None:
    status, body = await get(base, "/v1/rayservices/default/svc")
    assert status == 200
    assert (body["status"], body["deleted_at"]) == ("Running", "2026-01-01T12:00:50Z")
    assert body["rayservice"] == EXPECTED_VIEW
    assert body["rayjob"] is None
    listed = (await get(base, "/v1/rayservices", status="Running"))[1]["items"]
    assert [r["rayservice"]["active_cluster"] for r in listed] == ["svc-bbbbb"]
    status, document = await get(base, "/openapi.json")
    ref = document["paths"]["/v1/rayservices/{namespace}/{name}"]["get"]["responses"]["200"]["content"]
    jsonschema.validate(body, {**ref["application/json"]["schema"], "components": document["components"]})


async def test_raybus_history_shows_the_view_and_every_step(base: str) -> None:
    code, out, err = await run("rayservice", "default/svc", "--status-url", base)
    assert (code, err) == (0, "")
    assert "active   svc-bbbbb" in out
    assert "clusters 2 created, 1 deleted" in out
    assert "upgrades 1 completed, the last took 12.0s; 0 rollback(s)" in out
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("AT ")) + 1
    table = lines[start : lines.index("", start)]
    steps = [tuple(re.split(r"\s{2,}", line)[1:3]) for line in table]
    assert steps == [
        ("lifecycle", "- → created"),
        ("condition/Ready", "- → False"),
        ("pendingCluster", "- → svc-aaaaa"),
        ("traffic", "- → svc-aaaaa"),
        ("activeCluster", "- → svc-aaaaa"),
        ("serviceStatus", "- → Running"),
        ("condition/Ready", "False → True"),
        ("pendingCluster", "- → svc-bbbbb"),
        ("traffic", "svc-aaaaa → svc-bbbbb"),
        ("activeCluster", "svc-aaaaa → svc-bbbbb"),
        ("clusterDeleted", "svc-aaaaa → -"),
        ("lifecycle", "created → deleted"),
    ]


async def test_migration_backfills_recorded_history(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """History recorded at 0002 (no view yet) gets its view rows when 0003 runs."""
    await upgrade(db_url, revision="0002")
    engine = create_engine(db_url)
    try:
        store = StatusStore(engine)
        with monkeypatch.context() as patched:  # persist as the 0002 service did: no RayService view
            patched.setattr(store_module, "_VIEWS", tuple(v for v in store_module._VIEWS if v.kind != "RayService"))
            # and one audit row per command (the delivery column came with 0004)
            row_of = store_module._command_row
            patched.setattr(
                store_module, "_command_row", lambda r: {k: v for k, v in row_of(r).items() if k != "delivery"}
            )
            patched.setattr(store_module, "_COMMAND_KEY", ("batch_id", "command_id"))
            await store.persist(records(upgrade_history()))
        await upgrade(db_url)
        async with engine.connect() as conn:
            query = sa.text("SELECT uid, active_cluster, upgrades, clusters_created FROM rayservices")
            rows = (await conn.execute(query)).all()
        assert [tuple(r) for r in rows] == [("rs-1", "svc-bbbbb", 1, 2)]
        found = await store.find_resource(kind="RayService", namespace="default", name="svc")
        assert found is not None and found.rayservice is not None
        assert found.rayservice.last_upgrade_seconds == 12.0
        assert found.rayservice.upgraded_at == EXPECTED_TIMES["upgraded_at"]
    finally:
        await engine.dispose()


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


async def test_metrics_count_each_persisted_transition_once(store: StatusStore) -> None:
    reader = InMemoryMetricReader()
    metrics = ResourceMetrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    history = upgrade_history()
    alive = history[:-1]  # everything but the deletion
    stats = await store.persist(records(alive))
    metrics.observe(stats)
    metrics.observe(await store.persist(records(alive)))  # redelivered: nothing new
    points = metric_points(reader)
    [info] = points["kuberay_service_info"]
    assert (info.value, dict(info.attributes)) == (1, {"name": "svc", "namespace": "default", "uid": "rs-1"})
    [upgrade] = points["raybus_rayservice_upgrade_duration_seconds"]
    assert (upgrade.count, upgrade.sum) == (1, 12.0)

    restarted = ResourceMetrics(MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("test"))
    await restarted.load(store)
    assert list(restarted.live_rayservices) == ["rs-1"]
    metrics.observe(await store.persist(records(history)))  # the deletion (its sequence is new)
    assert metrics.live_rayservices == {}
    assert "kuberay_service_info" not in metric_points(reader) or not metric_points(reader)["kuberay_service_info"]
