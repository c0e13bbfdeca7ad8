"""A decision split into parts under a byte budget, and joined back."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from schema.codec import encode
from schema.keys import ReconcileKey
from schema.messages import CommandBatch, CreateObject, EmitEvent, ObjectRef
from schema.parts import PartAssembler, join_parts, part_budget, part_msg_id, split_batch

KEY = ReconcileKey(kind="RayCluster", namespace="ns", name="big")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def decision(pods: int, *, suppressed: int = 0) -> CommandBatch:
    commands: list[CreateObject | EmitEvent] = []
    for i in range(pods):
        ref = ObjectRef(api_version="v1", kind="Pod", namespace="ns", name=f"big-worker-{i}")
        commands.append(CreateObject(id=f"c{i}", target=ref, body={"metadata": {"name": ref.name}, "pad": "x" * 900}))
        commands.append(EmitEvent(id=f"e{i}", regarding=ref, event_type="Normal", reason="Created", message=ref.name))
    return CommandBatch(
        id="d1",
        key=KEY,
        issued_at=T0,
        commands=tuple(commands),
        inputs=(7, 9),
        snapshot_revision=42,
        wake_at=T0,
        rules=(f"4.2/scale-up:big+{pods}",),
        suppressed=tuple(f"s{i}" for i in range(suppressed)),
    )


def test_a_batch_that_fits_is_one_message_with_the_decision_id() -> None:
    batch = decision(3)
    assert split_batch(batch, part_budget(1024 * 1024)) == [batch]
    assert part_msg_id(batch) == "d1"


def test_a_large_decision_is_split_in_order_under_the_budget_and_joins_back_exactly() -> None:
    batch = decision(1200, suppressed=2000)  # ~1.4 MB: over NATS's default max_payload
    budget = part_budget(1024 * 1024)
    parts = split_batch(batch, budget)
    assert len(encode(batch)) > 1024 * 1024 and len(parts) >= 6
    assert all(len(encode(p)) <= budget for p in parts)
    assert [(p.id, p.part, p.parts) for p in parts] == [("d1", i, len(parts)) for i in range(len(parts))]
    assert all(
        (p.inputs, p.snapshot_revision, p.wake_at, p.rules) == (batch.inputs, 42, T0, batch.rules) for p in parts
    )
    assert len({part_msg_id(p) for p in parts}) == len(parts)
    assert join_parts(parts) == batch


def test_a_command_larger_than_the_budget_gets_a_part_of_its_own() -> None:
    batch = decision(4)
    parts = split_batch(batch, 500)
    assert all(len(p.commands) + len(p.suppressed) == 1 for p in parts)
    assert join_parts(parts) == batch


def test_join_refuses_missing_or_foreign_parts() -> None:
    parts = split_batch(decision(50), 5000)
    with pytest.raises(ValueError, match="incomplete"):
        join_parts(parts[:-1])
    with pytest.raises(ValueError, match="incomplete"):
        join_parts([parts[1], parts[0], *parts[2:]])


def test_assembler_joins_parts_read_in_stream_order_and_reports_what_never_completed() -> None:
    whole = decision(50)
    parts = split_batch(whole, 5000)
    small = decision(1)
    assembler = PartAssembler()
    out = [assembler.add(p) for p in parts[:2]]
    out += [assembler.add(parts[0]), assembler.add(parts[1])]  # published again from its first part
    out += [assembler.add(p) for p in parts[2:]]
    out.append(assembler.add(small))
    broken = [p for p in split_batch(decision(50), 5000) if p.part != 1]
    out += [assembler.add(msgspec.structs.replace(p, id="d2")) for p in broken]
    assert [b for b in out if b is not None] == [whole, small]
    assert assembler.finish() == ["d2"]
