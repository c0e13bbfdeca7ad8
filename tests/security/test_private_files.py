"""What raybus writes for one user stays that user's: history exports and the ``raybus up`` state."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from services.replay.archive import to_file, write_history
from tests.e2e.test_shutdown import stack  # noqa: F401
from tests.unit.replay.test_archive import EXPORTED_AT, small_history


def others_may_read(path: Path) -> bool:
    return bool(stat.S_IMODE(path.stat().st_mode) & 0o077)


def test_a_history_export_is_the_owners_only_even_over_a_readable_file(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    path.write_text("{}")
    path.chmod(0o644)
    write_history(path, to_file(small_history(), exported_at=EXPORTED_AT, source="test"))
    assert not others_may_read(path)


@pytest.mark.e2e
def test_the_up_state_directory_its_database_kubeconfig_and_logs_are_the_owners_only(
    stack: tuple[subprocess.Popen[str], Path],  # noqa: F811
) -> None:
    _, state = stack
    private = [state, state / "logs", state / "kubeconfig", state / "raybus.db", *(state / "logs").iterdir()]
    assert len(private) > 4
    assert [p for p in private if others_may_read(p)] == []
