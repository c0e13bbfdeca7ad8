"""The pure rules deriving resource rows and the RayJob view from transitions."""

from __future__ import annotations

import itertools

import msgspec
import pytest

from services.status.transition_folds import (
    Fact,
    FieldMark,
    apply_fact,
    fold_rayjob,
    fold_resource,
    is_repeat,
    status_of,
    without_repeats,
)
from tests.unit.status.builders import at


def fact(field: str, frm: str, to: str, seconds: float, seq: int, **attributes: str) -> Fact:
    return Fact(field=field, from_value=frm, to_value=to, at=at(seconds), seq=seq, attributes=attributes)


LIFE = [
    fact("lifecycle", "", "created", 0, 1),
    fact("jobDeploymentStatus", "", "Initializing", 1, 2),
    fact("jobDeploymentStatus", "Initializing", "Running", 5, 3),
    fact("jobStatus", "", "RUNNING", 5, 3),
    fact("jobDeploymentStatus", "Running", "Complete", 9, 4),
    fact("lifecycle", "created", "deleted", 20, 5),
]


def test_resource_state_of_a_whole_life() -> None:
    state = fold_resource(None, LIFE)
    assert state is not None
    assert state.first_seen == at(0)
    assert state.updated_at == at(20)
    assert state.deleted_at == at(20)
    assert state.last_seq == 5
    assert {k: m.value for k, m in state.fields.items()} == {
        "lifecycle": "deleted",
        "jobDeploymentStatus": "Complete",
        "jobStatus": "RUNNING",
    }
    assert status_of(state, "jobDeploymentStatus") == "Complete"
    assert status_of(state, "serviceStatus") == ""


def test_resource_state_ignores_order_and_duplicates() -> None:
    expected = fold_resource(None, LIFE)
    for order in itertools.islice(itertools.permutations(LIFE), 0, None, 37):
        state = None
        for one in order:  # one at a time, as separate batches would
            state = apply_fact(state, one)
        assert state == expected
    assert fold_resource(expected, LIFE) == expected


def test_an_older_fact_never_overwrites_a_newer_value() -> None:
    state = apply_fact(None, fact("state", "", "ready", 10, 7))
    state = apply_fact(state, fact("state", "", "suspended", 3, 9))
    assert state.fields["state"].value == "ready"
    # equal time: the later stream sequence wins
    state = apply_fact(state, fact("state", "ready", "suspended", 10, 8))
    assert state.fields["state"].value == "suspended"


def test_first_seen_moves_back_when_the_created_fact_comes_late() -> None:
    state = apply_fact(None, fact("jobDeploymentStatus", "", "Initializing", 4, 9))
    state = apply_fact(state, fact("lifecycle", "", "created", 1, 3))
    assert state.first_seen == at(1)
    assert state.deleted_at is None


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        pytest.param([], {"attempts": 0, "deployment_status": "", "started_at": None}, id="nothing"),
        pytest.param(
            [
                fact(
                    "jobDeploymentStatus",
                    "",
                    "Initializing",
                    1,
                    1,
                    rayClusterName="c-1",
                    jobId="j-1",
                    submissionMode="HTTPMode",
                ),
                fact("jobDeploymentStatus", "Initializing", "Running", 2, 2),
                fact("jobStatus", "", "SUCCEEDED", 3, 3),
                fact("jobDeploymentStatus", "Running", "Complete", 3, 3),
            ],
            {
                "attempts": 1,
                "deployment_status": "Complete",
                "job_status": "SUCCEEDED",
                "cluster_name": "c-1",
                "job_id": "j-1",
                "submission_mode": "HTTPMode",
                "started_at": at(1),
                "ended_at": at(3),
            },
            id="one-attempt",
        ),
        pytest.param(
            [
                fact("jobDeploymentStatus", "", "Initializing", 1, 1, rayClusterName="c-1", jobId="j-1"),
                fact("jobDeploymentStatus", "Initializing", "Failed", 2, 2),
                fact("jobDeploymentStatus", "Failed", "Retrying", 3, 3, rayClusterName="", jobId=""),
                fact("jobDeploymentStatus", "Retrying", "", 4, 4),
                fact("jobDeploymentStatus", "", "Initializing", 5, 5, rayClusterName="c-2", jobId="j-2"),
            ],
            {
                "attempts": 2,
                "deployment_status": "Initializing",
                "cluster_name": "c-2",
                "job_id": "j-2",
                "started_at": at(5),
                "ended_at": None,
            },
            id="retried",
        ),
    ],
)
def test_rayjob_view(facts: list[Fact], expected: dict[str, object]) -> None:
    forward = fold_rayjob(facts)
    assert fold_rayjob(reversed(facts)) == forward
    for name, value in expected.items():
        assert getattr(forward, name) == value, name


def test_a_fact_that_repeats_the_latest_step_of_its_field_is_no_step() -> None:
    first = fact("jobDeploymentStatus", "", "Initializing", 1, 2)
    again = fact("jobDeploymentStatus", "", "Initializing", 2, 3)
    later = fact("jobDeploymentStatus", "Initializing", "Running", 5, 4)
    assert without_repeats(None, [again, first, later]) == [first, later]
    state = fold_resource(None, [first])
    assert is_repeat(state, again) and not is_repeat(state, later)
    assert not is_repeat(fold_resource(None, [first, later]), again)  # the field moved in between


def test_a_change_of_reason_alone_is_a_step_each_time() -> None:
    def ready(seconds: float, seq: int, reason: str, before: str) -> Fact:
        return Fact(
            field="condition/Ready",
            from_value="False",
            to_value="False",
            at=at(seconds),
            seq=seq,
            reason=reason,
            attributes={"fromReason": before},
        )

    steps = [
        ready(1, 2, "ZeroServeEndpoints", "Initializing"),
        ready(2, 3, "InitializingTimeout", "ZeroServeEndpoints"),
    ]
    again = ready(3, 4, "InitializingTimeout", "ZeroServeEndpoints")
    assert without_repeats(None, [*steps, again]) == steps


def test_a_mark_stored_without_the_value_it_came_from_repeats_nothing() -> None:
    state = fold_resource(None, [fact("jobStatus", "", "RUNNING", 1, 2)])
    assert state is not None
    stored = {"jobStatus": {"value": "RUNNING", "at": at(1).isoformat(), "seq": 2}}  # as such a row holds it
    older = msgspec.structs.replace(state, fields=msgspec.convert(stored, dict[str, FieldMark]))
    assert not is_repeat(older, fact("jobStatus", "", "RUNNING", 2, 3))
