"""CLI parsing and error paths (no NATS)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.replay.cli import main, parse_key, parse_time
from services.runtime.errors import PermanentError
from tests.unit.replay.clirun import NOW, replay_cli
from tests.unit.replay.conftest import REPLAYS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("24h", NOW - timedelta(hours=24), id="hours"),
        pytest.param("90s", NOW - timedelta(seconds=90), id="seconds"),
        pytest.param("30m", NOW - timedelta(minutes=30), id="minutes"),
        pytest.param("7d", NOW - timedelta(days=7), id="days"),
        pytest.param("2025-03-01T12:00:00Z", datetime(2025, 3, 1, 12, tzinfo=UTC), id="rfc3339 Z"),
        pytest.param("2025-03-01T13:00:00+01:00", datetime(2025, 3, 1, 12, tzinfo=UTC), id="offset"),
        pytest.param("2025-03-01T12:00:00", datetime(2025, 3, 1, 12, tzinfo=UTC), id="naive is UTC"),
    ],
)
def test_parse_time(text: str, expected: datetime) -> None:
    assert parse_time(text, now=NOW) == expected


def test_parse_key() -> None:
    assert str(parse_key("rayclusters", "ns/x")) == "RayCluster/ns/x"
    assert str(parse_key("RayJob", "x")) == "RayJob/default/x"
    for kind, ref in (("Pod", "ns/x"), ("RayJob", "a/b/c"), ("RayJob", "ns/")):
        with pytest.raises(PermanentError):
            parse_key(kind, ref)
    with pytest.raises(PermanentError):
        parse_time("yesterday", now=NOW)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param([], "give KIND NAMESPACE/NAME", id="nothing"),
        pytest.param(["Pod", "ns/x"], "unknown kind", id="kind"),
        pytest.param(["--all", "--from-file", "x.json"], "--all takes no", id="all+file"),
        pytest.param(["--from-file", "x.json", "RayCluster", "a/b"], "--from-file takes no", id="file+key"),
        pytest.param(["--from-file", "/nonexistent.json"], "nonexistent", id="missing file"),
        pytest.param(
            ["--from-file", str(REPLAYS / "raycluster-recreated.json"), "--step", "999"], "no step 999", id="step"
        ),
        pytest.param(
            ["--from-file", str(REPLAYS / "raycluster-recreated.json"), "--since", "soon"], "RFC 3339", id="time"
        ),
        pytest.param(
            ["--from-file", str(REPLAYS / "raycluster-recreated.json"), "--feature-gates", "Nope=true"],
            "unknown feature gate",
            id="gate",
        ),
    ],
)
def test_usage_errors_exit_two(argv: list[str], message: str) -> None:
    run = replay_cli(argv)
    assert run.code == 2
    assert message in run.err


def test_unreachable_nats_exits_two() -> None:
    run = replay_cli(["RayCluster", "default/x", "--nats-url", "nats://127.0.0.1:1", "--connect-timeout", "0.5"])
    assert run.code == 2 and "cannot connect to NATS" in run.err


def test_config_current_uses_the_environment_instead_of_the_file() -> None:
    path = str(REPLAYS / "raycluster-sample-lifecycle.json")
    recorded = replay_cli(["--from-file", path, "--config", "current"], env={})
    assert recorded.code == 0 and "current settings" in recorded.out
    changed = replay_cli(
        ["--from-file", path, "--config", "current"], env={"RAYBUS_FEATURE_GATES": "RayClusterStatusConditions=false"}
    )
    assert changed.code == 1


def test_main_runs_with_process_arguments(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--from-file", str(REPLAYS / "raycluster-recreated.json"), "--divergences-only"]) == 0
    out = capsys.readouterr().out
    assert "19 decision(s): 19 match" in out or "match, 0 diverged" in out
