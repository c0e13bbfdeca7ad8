"""``raybus history`` against a running status API (after the custom resource is gone)."""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from services.status import history_cli
from services.status.responses import History
from services.status.store import StatusStore
from tests.component.status.conftest import history_api
from tests.fixtures.nats import free_port
from tests.unit.status.builders import lifecycle, result, transition

LIFE = [
    lifecycle("created", uid="u-old", seconds=0),
    lifecycle("deleted", uid="u-old", seconds=5, rv="2"),
    lifecycle("created", uid="u-new", seconds=10, rv="3"),
    result(
        transition("jobDeploymentStatus", "", "Initializing", uid="u-new", seconds=11, rv="4"),
        transition(
            "jobDeploymentStatus",
            "Initializing",
            "Failed",
            uid="u-new",
            seconds=20,
            rv="5",
            reason="DeadlineExceeded",
            message="The RayJob has passed the activeDeadlineSeconds.",
        ),
        batch_id="b1",
    ),
    lifecycle("deleted", uid="u-new", seconds=30, rv="6"),
]


@pytest.fixture
async def status_url(store: StatusStore) -> AsyncIterator[str]:
    async with history_api(store, LIFE, trace_id="0123456789abcdef" * 2) as url:
        yield url


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    history_cli.add_arguments(parser)
    return parser.parse_args(argv)


async def run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await history_cli.run(parse(*argv), env=env or {}, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


async def test_table_of_the_latest_incarnation(status_url: str) -> None:
    code, out, err = await run("rayjob", "default/demo", "--status-url", status_url)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "RayJob default/demo"
    assert lines[1].split() == ["uid", "u-new"]
    assert lines[2].split() == ["created", "2026-01-01T12:00:10.000Z"]
    assert lines[3].split() == ["deleted", "2026-01-01T12:00:30.000Z"]
    assert lines[4].split() == ["status", "Failed"]
    assert lines[6].split()[:5] == ["AT", "FIELD", "FROM", "→", "TO"]
    rows = lines[7 : lines.index("", 7)]
    assert lines[-1].startswith("replay from a row: raybus replay RayJob default/demo --uid u-new --at <AT>")
    assert lines[-1].endswith("(the last: --at 2026-01-01T12:00:30.000Z)")
    assert [row.split()[:5] for row in rows] == [
        ["2026-01-01T12:00:10.000Z", "lifecycle", "-", "→", "created"],
        ["2026-01-01T12:00:11.000Z", "jobDeploymentStatus", "-", "→", "Initializing"],
        ["2026-01-01T12:00:20.000Z", "jobDeploymentStatus", "Initializing", "→", "Failed"],
        ["2026-01-01T12:00:30.000Z", "lifecycle", "created", "→", "deleted"],
    ]
    assert "DeadlineExceeded  The RayJob has passed the activeDeadlineSeconds.  01234567" in rows[2]


async def test_json_of_an_older_incarnation_found_through_endpoints_json(status_url: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "endpoints.json").write_text(json.dumps({"status_url": status_url, "nats_url": "nats://x"}))
    code, out, _ = await run(
        "RayJobs", "default/demo", "--uid", "u-old", "--json", env={"RAYBUS_STATE_DIR": str(state)}
    )
    assert code == 0
    history: History = msgspec.json.decode(out, type=History)
    assert (history.resource.uid, [t.to_value for t in history.transitions]) == ("u-old", ["created", "deleted"])


async def test_errors_are_reported_with_exit_codes(status_url: str) -> None:
    code, out, err = await run("rayjob", "default/never", "--status-url", status_url)
    assert (code, out) == (1, "")
    assert "no RayJob default/never" in err
    assert (await run("pod", "default/demo", "--status-url", status_url))[0] == 2
    code, _, err = await run("rayjob", "default/demo", "--status-url", f"http://127.0.0.1:{free_port()}")
    assert code == 2
    assert "cannot reach the status API" in err
