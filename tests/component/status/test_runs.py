"""A RayCronJob's scheduled runs through the history API, each linked to the RayJob it created."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import jsonschema
import pytest

from schema.messages import CommandResult
from services.status.store import StatusStore
from tests.component.status.conftest import history_api
from tests.component.status.test_api import get
from tests.component.status.test_history_cli import run
from tests.unit.status.builders import lifecycle, result, transition


def tick(
    minute: int, *, rayjob: str, previous: str = "", seconds: float, reason: str = "Scheduled", rv: str
) -> CommandResult:
    """The ``schedule`` transition of cron job ``nightly`` (uid ``cj``) for the tick at 12:0<minute>."""
    return result(
        transition(
            "schedule",
            previous,
            f"2026-01-01T12:0{minute}:00Z",
            kind="RayCronJob",
            uid="cj",
            name="nightly",
            seconds=seconds,
            rv=rv,
            reason=reason,
            message="concurrencyPolicy=Forbid",
            attributes={"rayJobName": rayjob},
        ),
        batch_id=f"tick-{minute}",
    )


HISTORY = [
    # a RayJob of the same name as a later run, left by an older cron job of the same name
    lifecycle("created", uid="old-b", name="nightly-b", seconds=-300),
    lifecycle("created", uid="cj", kind="RayCronJob", name="nightly", seconds=0),
    tick(1, rayjob="nightly-a", seconds=60, rv="10"),
    lifecycle("created", uid="ra", name="nightly-a", seconds=61),
    result(
        transition("jobDeploymentStatus", "", "Initializing", uid="ra", name="nightly-a", seconds=62, rv="11"),
        transition("jobDeploymentStatus", "Initializing", "Complete", uid="ra", name="nightly-a", seconds=90, rv="12"),
        transition("jobStatus", "", "SUCCEEDED", uid="ra", name="nightly-a", seconds=90, rv="12"),
        name="nightly-a",
        batch_id="ra",
    ),
    tick(2, rayjob="", previous="2026-01-01T12:01:00Z", seconds=120, reason="Skipped", rv="13"),
    tick(3, rayjob="nightly-b", previous="2026-01-01T12:02:00Z", seconds=180, rv="14"),
    lifecycle("deleted", uid="ra", name="nightly-a", seconds=200, rv="15"),
]


@pytest.fixture
async def base(store: StatusStore) -> AsyncIterator[str]:
    async with history_api(store, HISTORY) as url:
        yield url


async def test_runs_are_linked_to_their_rayjobs(base: str) -> None:
    status, body = await get(base, "/v1/raycronjobs/default/nightly/runs")
    assert status == 200
    assert (body["resource"]["uid"], body["total"]) == ("cj", 3)
    runs: list[dict[str, Any]] = body["runs"]
    assert [(r["scheduled_at"], r["outcome"], r["rayjob_name"]) for r in runs] == [
        ("2026-01-01T12:01:00Z", "Scheduled", "nightly-a"),
        ("2026-01-01T12:02:00Z", "Skipped", ""),
        ("2026-01-01T12:03:00Z", "Scheduled", "nightly-b"),
    ]
    first = runs[0]
    assert first["rayjob_uid"] == "ra"
    assert (first["deployment_status"], first["job_status"]) == ("Complete", "SUCCEEDED")
    assert first["rayjob_deleted_at"] == "2026-01-01T12:03:20Z"
    assert first["history_url"] == "/v1/rayjobs/default/nightly-a/transitions?uid=ra"
    assert first["recorded_at"] == "2026-01-01T12:01:00Z"
    assert first["trace_id"] == f"{3:032x}"
    status, linked = await get(base, first["history_url"].split("?")[0], uid="ra")
    assert status == 200
    assert linked["resource"]["uid"] == "ra"
    # a tick naming no RayJob; nightly-b: not seen yet, and the older RayJob of that name is not this run's
    for one in runs[1:]:
        assert one["rayjob_uid"] is None and one["history_url"] is None and one["deployment_status"] is None

    status, latest = await get(base, "/v1/raycronjobs/default/nightly/runs", limit="2")
    assert (status, latest["total"]) == (200, 3)
    assert [r["scheduled_at"] for r in latest["runs"]] == ["2026-01-01T12:02:00Z", "2026-01-01T12:03:00Z"]

    for path, params, code in [
        ("/v1/raycronjobs/default/absent/runs", {}, 404),
        ("/v1/raycronjobs/default/nightly/runs", {"uid": "ra"}, 404),
        ("/v1/raycronjobs/default/nightly/runs", {"limit": "0"}, 400),
    ]:
        assert (await get(base, path, **params))[0] == code, (path, params)


async def test_runs_in_the_openapi_document(base: str) -> None:
    _, document = await get(base, "/openapi.json")
    path = "/v1/raycronjobs/{namespace}/{name}/runs"
    ref = document["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    body = (await get(base, "/v1/raycronjobs/default/nightly/runs"))[1]
    jsonschema.validate(body, {"$ref": ref, "components": document["components"]})


async def test_raybus_history_prints_the_runs_with_their_rayjobs(base: str) -> None:
    code, out, err = await run("raycronjob", "default/nightly", "--status-url", base)
    assert (code, err) == (0, "")
    text = out.split("Runs (3)\n", 1)[1].splitlines()
    assert text[0].split() == ["SCHEDULED", "OUTCOME", "RAYJOB", "UID", "STATUS"]
    assert [row.split() for row in text[1:4]] == [
        ["2026-01-01T12:01:00.000Z", "Scheduled", "nightly-a", "ra", "Complete/SUCCEEDED", "(deleted)"],
        ["2026-01-01T12:02:00.000Z", "Skipped", "-", "-", "-"],
        ["2026-01-01T12:03:00.000Z", "Scheduled", "nightly-b", "-", "(not", "in", "the", "history", "yet)"],
    ]
    assert text[4] == "(a run's own timeline: raybus history rayjob default/RAYJOB)"
    assert "schedule" in out.split("Runs (3)")[0]  # the timeline above lists the same ticks
