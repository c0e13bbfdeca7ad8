"""Pure parts of ``raybus history``: where the API is, argument parsing, the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.runtime.errors import PermanentError
from services.status.history_cli import render_table, resolve_status_url, split_ref
from services.status.responses import History, ResourceOut
from tests.unit.status.builders import at


def test_status_url_order(tmp_path: Path) -> None:
    (tmp_path / "endpoints.json").write_text(json.dumps({"status_url": "http://from-file:1/"}))
    env = {"RAYBUS_STATUS_URL": "http://from-env:2", "RAYBUS_STATE_DIR": "/nonexistent"}
    assert resolve_status_url(flag="http://flag:3/", state_dir=None, env=env) == "http://flag:3"
    assert resolve_status_url(flag=None, state_dir=None, env=env) == "http://from-env:2"
    assert resolve_status_url(flag=None, state_dir=str(tmp_path), env={}) == "http://from-file:1"
    assert (
        resolve_status_url(flag=None, state_dir=None, env={"RAYBUS_STATE_DIR": str(tmp_path)}) == "http://from-file:1"
    )
    with pytest.raises(PermanentError, match="raybus up"):
        resolve_status_url(flag=None, state_dir=str(tmp_path / "missing"), env={})


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        pytest.param("ns/job", ("ns", "job"), id="namespaced"),
        pytest.param("job", ("default", "job"), id="default-namespace"),
        pytest.param("ns/a.b", ("ns", "a.b"), id="dotted-name"),
    ],
)
def test_split_ref(ref: str, expected: tuple[str, str]) -> None:
    assert split_ref(ref) == expected


@pytest.mark.parametrize("ref", ["ns/a/b", "/job", "ns/"])
def test_split_ref_rejects(ref: str) -> None:
    with pytest.raises(PermanentError):
        split_ref(ref)


def test_table_without_transitions() -> None:
    resource = ResourceOut(
        kind="RayCluster",
        uid="u",
        namespace="ns",
        name="c",
        status="",
        first_seen=at(0),
        deleted_at=None,
        updated_at=at(0),
        last_seq=1,
        fields={},
    )
    text = render_table(History(resource=resource, transitions=[]))
    assert text.splitlines()[3].split() == ["deleted", "-"]
    assert text.endswith("(no transitions recorded)")
