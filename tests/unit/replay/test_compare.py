"""Readable diffs: field diffs of objects, command list diffs, wake-up diffs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from schema.messages import Command, CreateObject, DeleteObject, EmitEvent, ObjectRef
from services.reconciler.worker.decide import Ids
from services.replay.compare import (
    Published,
    command_diff,
    commands_equal,
    field_changes,
    field_diff,
    short_value,
    split_withheld,
    wake_diff,
    without_id,
)


def pod(name: str, *, image: str = "ray:2.52", cmd_id: str = "") -> CreateObject:
    target = ObjectRef(api_version="v1", kind="Pod", namespace="default", name=name)
    body = {"metadata": {"name": name}, "spec": {"containers": [{"name": "ray", "image": image}]}}
    return CreateObject(id=cmd_id or f"create-{name}", target=target, body=body)


def delete(name: str) -> DeleteObject:
    return DeleteObject(
        id=f"delete-{name}", target=ObjectRef(api_version="v1", kind="Pod", namespace="default", name=name)
    )


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param({"a": 1}, {"a": 1}, [], id="equal"),
        pytest.param({"a": 1}, {"a": 2}, ["a: 1 → 2"], id="changed"),
        pytest.param({}, {"s": {"x": True}}, ['s: ∅ → {"x":true}'], id="added"),
        pytest.param({"a": 1, "b": 2}, {"a": 1}, ["b: 2 → ∅"], id="removed"),
        pytest.param({"l": [1, 2]}, {"l": [1, 3, 4]}, ["l[1]: 2 → 3", "l[2]: ∅ → 4"], id="list items"),
        pytest.param({"l": []}, {"l": [1]}, ["l: [] → [1]"], id="empty list"),
        pytest.param(
            {"metadata": {"resourceVersion": "1", "labels": {}}},
            {"metadata": {"resourceVersion": "2", "labels": {"a": "b"}}},
            ['metadata.labels.a: ∅ → "b"'],
            id="resourceVersion ignored",
        ),
    ],
)
def test_field_diff(old: Any, new: Any, expected: list[str]) -> None:
    assert field_diff(old, new, limit=10) == expected


def test_field_diff_is_limited_and_values_are_clipped() -> None:
    old = {f"k{i}": i for i in range(10)}
    new = {f"k{i}": i + 1 for i in range(10)}
    lines = field_diff(old, new, limit=3)
    assert lines[-1] == "(+7 more)" and len(lines) == 4
    assert len(short_value("x" * 500)) == 48
    assert len(field_changes(old, new)) == 10


def test_equal_command_lists() -> None:
    assert commands_equal([pod("a"), delete("b")], [pod("a"), delete("b")])
    assert command_diff([pod("a")], [pod("a")]) == []


def test_same_id_other_content_differs() -> None:
    recorded, today = [pod("a")], [pod("a", image="ray:2.53")]
    assert not commands_equal(recorded, today)
    assert command_diff(recorded, today) == [
        "~ create_object Pod default/a",
        '    body.spec.containers[0].image: "ray:2.52" → "ray:2.53"',
    ]


def test_other_id_same_content_differs_and_says_so() -> None:
    lines = command_diff([pod("a")], [pod("a", cmd_id="other")])
    assert lines == ["~ create_object Pod default/a", '    id: "create-a" → "other"']


def test_order_only() -> None:
    lines = command_diff([pod("a"), pod("b")], [pod("b"), pod("a")])
    assert lines == [
        "same commands in a different order:",
        "  1. create_object Pod default/b",
        "  2. create_object Pod default/a",
    ]


def test_missing_and_extra_commands() -> None:
    recorded: list[Command] = [pod("a"), delete("x")]
    today: list[Command] = [pod("a"), pod("c")]
    assert command_diff(recorded, today) == [
        "- delete_object Pod default/x  (recorded, not decided now)",
        "+ create_object Pod default/c  (decided now, not recorded)",
    ]


def test_wake_diff() -> None:
    at = datetime(2025, 1, 1, tzinfo=UTC)
    assert wake_diff(at, at) == []
    assert wake_diff(at, None) == ["~ wake_at: 2025-01-01T00:00:00.000000Z → none"]
    assert wake_diff(None, at + timedelta(seconds=1)) == ["~ wake_at: none → 2025-01-01T00:00:01.000000Z"]


def test_withheld_commands_are_matched_with_their_twins_content() -> None:
    """``suppressed`` names the in-flight twin of each withheld command (a command of an earlier batch,
    with its own id): today's commands are matched with the twin's content, and only those kept get ids,
    by the worker's rule."""
    published = Published()
    published.add([pod("a", cmd_id="earlier-a"), pod("b", cmd_id="earlier-b")])
    today = [without_id(pod(name)) for name in "acb"]
    c = Ids(7).give(today[1])[0]
    split = split_withheld(today, [c], ["earlier-b", "earlier-a"], published, rule=Ids(7))
    assert split.kept == (c,) and split.withheld == (0, 2) and not split.lacking
    assert split.commands == (today[0], c, today[2])  # the withheld ones as reconcile left them, without ids
    b = Ids(7).give(today[2])[0]
    split = split_withheld(today[1:], [c], ["earlier-a"], published, rule=Ids(7))
    assert split.kept == (c, b) and not split.withheld and split.lacking == ("earlier-a",)
    # A twin the history does not hold (aged out, or an older logic version's id) takes what is left over.
    split = split_withheld(today, [pod("c", cmd_id="x")], ["gone"], published, rule=Ids(7), ids=False)
    assert split.kept == (c, b) and split.withheld == (0,) and not split.lacking


def test_a_withheld_command_without_a_target_is_counted_as_the_worker_counts_it() -> None:
    """Of identical commands without a target (Events), the worker counts each, the withheld ones too: the
    one it publishes after a withheld twin is the second of its content."""
    event = EmitEvent(
        regarding=ObjectRef(api_version="v1", kind="Pod", namespace="default", name="a"),
        event_type="Normal",
        reason="Created",
        message="Created worker Pod a",
    )
    rule = Ids(7)
    first, second = rule.give(event)[0], rule.give(event)[0]
    published = Published()
    published.add([first])
    split = split_withheld([event, event], [second], [first.id], published, rule=Ids(7))
    assert split.kept == (second,) and split.withheld == (0,) and split.commands == (event, second)
