"""A message of the results stream holds a run's results together, or one result on its own (the watch
side's lifecycle facts, and what an applier before batched results stored): both decode to their results."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from schema import codec
from schema.keys import ReconcileKey
from schema.messages import CommandResult, ResultBatch

KEY = ReconcileKey(kind="RayCluster", namespace="default", name="demo")


def outcome(command_id: str) -> CommandResult:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return CommandResult(
        batch_id="b", command_id=command_id, key=KEY, verb="observe", target="t", outcome="applied", at=at
    )


def test_a_batch_and_a_single_result_both_decode_to_their_results() -> None:
    results = (outcome("0"), outcome("1"))
    assert codec.decode_results(codec.encode(ResultBatch(results=results))) == results
    assert codec.decode_results(codec.encode(results[0])) == results[:1]


@pytest.mark.parametrize(
    "payload",
    [b'{"type": "command_batch", "id": "x"}', b'{"type": "result_batch", "results": [{"type": "result_batch"}]}'],
)
def test_anything_else_is_refused(payload: bytes) -> None:
    with pytest.raises(msgspec.ValidationError):
        codec.decode_results(payload)
