"""The export file: JSON and YAML round trips, versioning, strings that look like timestamps."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
import yaml

from schema.config import FeatureGates, OperatorConfig
from schema.messages import SCHEMA_VERSION
from services.reconciler.worker.decide import LOGIC_VERSION
from services.replay.archive import (
    FORMAT,
    FORMAT_VERSION,
    HistoryFile,
    dumps,
    loads,
    read_history_file,
    to_file,
    write_history,
)
from services.replay.history import KeyHistory
from services.runtime.errors import PermanentError
from tests.unit.replay.conftest import KEY, REPLAYS, decision, event, load, observation, tick

EXPORTED_AT = datetime(2030, 1, 1, tzinfo=UTC)


def small_history() -> KeyHistory:
    created = {"creationTimestamp": "2025-03-01T12:00:00Z", "note": "yes", "n": "010"}
    return KeyHistory(
        key=KEY,
        inputs=(
            event(1, 1, "RayCluster", "demo", status=created),
            observation(2, 2, "j", {"status": "RUNNING"}),
            tick(3),
        ),
        decisions=(decision(4, 2, (1, 2)), decision(5, 2, (3,))),
    )


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_round_trip(fmt: str, tmp_path: Path) -> None:
    config = OperatorConfig(gates=FeatureGates(ray_cron_job=True))
    document = to_file(small_history(), exported_at=EXPORTED_AT, operator_config=config, source="test", note="n")
    path = tmp_path / f"history.{fmt}"
    write_history(path, document)
    back = read_history_file(path)
    assert back == document
    assert back.history() == small_history()
    assert back.operator_config == config
    # Strings that YAML would read as timestamps, booleans or octal stay strings.
    status = back.inputs[0].message.object["status"]  # type: ignore[union-attr]
    assert status == {"creationTimestamp": "2025-03-01T12:00:00Z", "note": "yes", "n": "010"}


def test_header_fields() -> None:
    data = msgspec.json.decode(dumps(to_file(small_history(), exported_at=EXPORTED_AT)))
    assert data["format"] == FORMAT and data["format_version"] == FORMAT_VERSION
    assert data["schema_version"] == SCHEMA_VERSION and data["logic_version"] == LOGIC_VERSION
    assert data["key"] == {"kind": "RayCluster", "namespace": "default", "name": "demo"}
    assert data["inputs"][0]["message"]["schema_version"] == SCHEMA_VERSION  # each message keeps its own
    assert data["inputs"][0]["message"]["type"] == "watch_event"
    assert data["decisions"][0]["batch"]["type"] == "command_batch"


def test_recorded_files_load_in_both_formats() -> None:
    document = load(REPLAYS / "raycluster-sample-lifecycle.json")
    assert loads(dumps(document, "yaml")) == document


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(lambda d: d.update(format="something-else"), "not a raybus replay history", id="format"),
        pytest.param(lambda d: d.update(format_version=FORMAT_VERSION + 1), "newer than this raybus reads", id="newer"),
        pytest.param(lambda d: d.update(inputs=[{"seq": "x"}]), "malformed history file", id="malformed"),
    ],
)
def test_bad_files_are_refused(mutate: object, message: str) -> None:
    data = msgspec.json.decode(dumps(to_file(small_history(), exported_at=EXPORTED_AT)))
    mutate(data)  # type: ignore[operator]
    for raw in (msgspec.json.encode(data), yaml.safe_dump(data).encode()):
        with pytest.raises(PermanentError, match=message):
            loads(raw)
    with pytest.raises(PermanentError, match="not a raybus replay history"):
        loads(b"- a list\n")


def test_unknown_fields_of_a_newer_minor_writer_are_ignored() -> None:
    data = msgspec.json.decode(dumps(to_file(small_history(), exported_at=EXPORTED_AT)))
    data["something_new"] = 1
    data["inputs"][0]["message"]["field_from_the_future"] = "x"
    assert loads(msgspec.json.encode(data)).history() == small_history()


def test_missing_file_is_a_permanent_error(tmp_path: Path) -> None:
    with pytest.raises(PermanentError):
        read_history_file(tmp_path / "nope.json")
    assert isinstance(read_history_file(REPLAYS / "raycluster-recreated.json"), HistoryFile)
