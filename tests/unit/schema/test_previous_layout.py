"""Bus messages recorded with an earlier build, through today's wire decoders (docs/evolution.md).

The histories in ``tests/replays/`` hold the watch events, observations and command batches
of real pipeline runs exactly as they were on the bus when recorded (logic version 1). Each is encoded
back to its wire form and decoded by ``schema.codec``, as a consumer of today's build would decode it
during an upgrade; re-encoding the result must keep every recorded field with its recorded value (a
field dropped or read differently is information the upgrade loses).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from schema import codec
from tests.helpers import REPO

RECORDINGS = sorted((REPO / "tests" / "replays").glob("*.json"))


def recorded_messages(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """``("input" | "batch", message)`` for every message of the recording, in its order."""
    history = json.loads(path.read_text())
    found = [("input", item["message"]) for item in history["inputs"]]
    return found + [("batch", item["batch"]) for item in history["decisions"]]


def test_the_recordings_hold_watch_events_observations_and_batches() -> None:
    """What the check covers (timer ticks, results and dead letters are not in these recordings)."""
    seen = {message["type"] for path in RECORDINGS for _, message in recorded_messages(path)}
    assert {"watch_event", "observation", "command_batch"} <= seen, seen


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_todays_decoders_read_every_recorded_message_without_loss(path: Path) -> None:
    decode = {"input": codec.decode_input, "batch": codec.decode_batch}
    for role, message in recorded_messages(path):
        wire = json.dumps(message, separators=(",", ":")).encode()
        again = json.loads(codec.encode(decode[role](wire)))
        lost = {name: value for name, value in message.items() if again.get(name) != value}
        assert lost == {}, (path.name, message["type"], lost)
