"""A deliberately changed reconcile produces exactly the expected divergences (and exit code 1).

temporal's replayer tests as the model: a non-deterministic variant of the code must fail the replay,
fail-fast raises the first divergence, fail-slow collects them all, the iterator streams results.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from schema.config import OperatorConfig
from schema.decision import Decision, Snapshot
from schema.messages import CreateObject, EmitEvent
from schema.times import format_time_exact
from services.reconciler.raycluster import reconcile as raycluster_reconcile
from services.reconciler.worker.decide import LOGIC_VERSION
from services.replay.compare import fingerprint, without_id
from services.replay.replayer import Replayer
from services.runtime.errors import RaybusError, ReplayDivergence
from tests.unit.replay.clirun import replay_cli
from tests.unit.replay.conftest import REPLAYS, load

LIFECYCLE = REPLAYS / "raycluster-sample-lifecycle.json"
DEFAULT_REQUEUE = timedelta(seconds=300)


def slower_requeue(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    """RayCluster reconcile with the idle requeue at 10 minutes instead of 5."""
    decision = raycluster_reconcile(snapshot, now, config)
    if decision.wake_at is not None and decision.wake_at - now == DEFAULT_REQUEUE:
        return msgspec.structs.replace(decision, wake_at=now + 2 * DEFAULT_REQUEUE)
    return decision


def extra_pod_label(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    """RayCluster reconcile that adds a label to every Pod it creates."""
    decision = raycluster_reconcile(snapshot, now, config)
    commands = []
    for command in decision.commands:
        if isinstance(command, CreateObject) and command.target.kind == "Pod":
            body: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(command.body))
            body["metadata"].setdefault("labels", {})["example.com/changed"] = "yes"
            command = msgspec.structs.replace(command, body=body)
        commands.append(command)
    return msgspec.structs.replace(decision, commands=tuple(commands))


def without_events(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    """RayCluster reconcile that stopped emitting Kubernetes Events."""
    decision = raycluster_reconcile(snapshot, now, config)
    kept = tuple(c for c in decision.commands if type(c).__name__ != "EmitEvent")
    return msgspec.structs.replace(decision, commands=kept)


def crashing(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    raise RuntimeError("a bug")  # not a malformed object: decide's guard lets it through


def test_a_changed_requeue_diverges_exactly_where_the_idle_requeue_was_recorded() -> None:
    history = load(LIFECYCLE).history()
    expected = [
        index
        for index, recorded in enumerate(history.decisions, start=1)
        if recorded.batch.wake_at is not None and recorded.batch.wake_at - recorded.batch.issued_at == DEFAULT_REQUEUE
    ]
    assert expected, "the recorded history has idle requeues"
    result = Replayer(reconcilers={"RayCluster": slower_requeue}).replay_history(history, raise_on_divergence=False)
    assert [d.step for d in result.divergences] == expected
    for step in result.steps:
        if step.index in expected:
            assert step.verdict == "diverged"
            recorded_wake = step.recorded.wake_at
            assert recorded_wake is not None
            assert step.diff == (
                f"~ wake_at: {format_time_exact(recorded_wake)} → {format_time_exact(recorded_wake + DEFAULT_REQUEUE)}",
                f"(recorded with logic_version {step.recorded.logic_version}, today's is {LOGIC_VERSION})",
            )
        else:
            assert step.verdict == "match"
    divergence = result.divergences[0]
    assert isinstance(divergence, RaybusError)
    assert divergence.expected == divergence.actual  # same commands: only the wake-up moved


def test_a_changed_pod_label_diverges_exactly_where_pods_were_created() -> None:
    history = load(LIFECYCLE).history()
    expected = [
        index
        for index, recorded in enumerate(history.decisions, start=1)
        if any(isinstance(c, CreateObject) and c.target.kind == "Pod" for c in recorded.batch.commands)
    ]
    assert len(expected) >= 3
    result = Replayer(reconcilers={"RayCluster": extra_pod_label}).replay_history(history, raise_on_divergence=False)
    assert [d.step for d in result.divergences] == expected
    step = next(s for s in result.steps if s.index == expected[0])
    pods = [c for c in step.recorded.commands if isinstance(c, CreateObject) and c.target.kind == "Pod"]
    for pod in pods:
        assert f"~ create_object Pod default/{pod.target.name}" in step.diff
    assert step.diff.count('    body.metadata.labels.example.com/changed: ∅ → "yes"') == len(pods)
    assert all(not line.startswith(("-", "+")) for line in step.diff)  # paired, not missing/extra
    # Recorded under an older logic version, whose ids followed another rule: the contents tell them apart.
    assert not any(line.strip().startswith("id:") for line in step.diff)
    divergence = result.divergences[0]
    assert divergence.expected == step.recorded.commands
    actual = [fingerprint(without_id(c)) for c in divergence.actual]  # type: ignore[attr-defined]
    assert actual != [fingerprint(without_id(c)) for c in step.recorded.commands]


def test_dropped_commands_show_as_recorded_only() -> None:
    history = load(LIFECYCLE).history()
    result = Replayer(reconcilers={"RayCluster": without_events}).replay_history(history, raise_on_divergence=False)
    assert result.divergences
    step = next(s for s in result.steps if s.diverged)
    assert any(
        line.startswith("- emit_event Event RayCluster") and "recorded, not decided now" in line for line in step.diff
    )


def test_withheld_commands_must_still_be_decided() -> None:
    """The worker withheld commands still in flight (``suppressed``): today's decision must still make
    them, and a reconcile that no longer does diverges on exactly as many."""
    history = load(REPLAYS / "raycluster-scaling.json").history()
    normal = Replayer().replay_history(history)
    step = next(s for s in normal.steps if any(isinstance(c, EmitEvent) for c in s.withheld_commands()))
    events = [c for c in step.withheld_commands() if isinstance(c, EmitEvent)]
    changed = Replayer(reconcilers={"RayCluster": without_events}).replay_history(history, raise_on_divergence=False)
    diff = next(s.diff for s in changed.steps if s.index == step.index)
    lacking = [line for line in diff if line.startswith("- withheld command ")]
    assert len(lacking) == len(events)
    assert all(line.endswith("(recorded as in flight, not decided now)") for line in lacking)
    run = replay_cli(["--from-file", str(REPLAYS / "raycluster-scaling.json")])
    assert run.code == 0 and "(withheld: in flight)" in run.out and " withheld, same wake-up)" in run.out


def test_a_crash_of_todays_code_is_a_divergence_not_a_replayer_failure() -> None:
    history = load(LIFECYCLE).history()
    result = Replayer(reconcilers={"RayCluster": crashing}).replay_history(history, raise_on_divergence=False)
    assert len(result.divergences) == len(history.decisions)
    assert result.steps[0].error == "RuntimeError: a bug"
    assert result.steps[0].diff[0] == "! reconcile raised RuntimeError: a bug"


def test_fail_fast_raises_the_first_divergence() -> None:
    history = load(LIFECYCLE).history()
    first = Replayer(reconcilers={"RayCluster": extra_pod_label}).replay_history(history, raise_on_divergence=False)
    with pytest.raises(ReplayDivergence) as caught:
        Replayer(reconcilers={"RayCluster": extra_pod_label}).replay_history(history)
    assert caught.value.step == first.divergences[0].step
    assert "diverged" in str(caught.value) and "example.com/changed" in str(caught.value)


def test_replay_histories_fail_fast_or_collect_and_the_iterator_streams() -> None:
    histories = [load(path).history() for path in sorted(REPLAYS.glob("*.json"))]
    changed = Replayer(reconcilers={"RayCluster": slower_requeue})
    with pytest.raises(ReplayDivergence):
        changed.replay_histories(histories)
    collected = changed.replay_histories(histories, raise_on_divergence=False)
    assert set(collected.results) == {str(h.key) for h in histories}
    assert all(r.divergences for r in collected.results.values())
    assert len(collected.divergences) == sum(len(r.divergences) for r in collected.results.values())
    stream = changed.replay_iterator(histories)
    first = next(stream)  # one result at a time, before the others are replayed
    assert first.key == histories[0].key
    assert Replayer().replay_histories(histories).divergences == ()


@pytest.mark.parametrize(
    ("reconcile", "expected"),
    [
        pytest.param(slower_requeue, "~ wake_at:", id="requeue"),
        pytest.param(extra_pod_label, "example.com/changed", id="pod-label"),
        pytest.param(crashing, "! reconcile raised RuntimeError", id="crash"),
    ],
)
def test_cli_marks_divergences_and_exits_one(reconcile: Any, expected: str) -> None:
    run = replay_cli(["--from-file", str(LIFECYCLE)], reconcilers={"RayCluster": reconcile})
    assert run.code == 1
    assert "DIVERGED" in run.out and expected in run.out
    assert "    recorded:\n" in run.out and "    diff:\n" in run.out
    only = replay_cli(["--from-file", str(LIFECYCLE), "--divergences-only"], reconcilers={"RayCluster": reconcile})
    assert "  match" not in only.out and only.code == 1
    fast = replay_cli(["--from-file", str(LIFECYCLE), "--fail-fast"], reconcilers={"RayCluster": reconcile})
    assert fast.code == 1 and fast.out.startswith("RayCluster/default/replay-lifecycle step ")


def test_step_detail_of_a_diverged_step_shows_both_decisions() -> None:
    result = Replayer(reconcilers={"RayCluster": extra_pod_label}).replay_history(
        load(LIFECYCLE).history(), raise_on_divergence=False
    )
    index = result.divergences[0].step
    run = replay_cli(["--from-file", str(LIFECYCLE), "--step", str(index)], reconcilers={"RayCluster": extra_pod_label})
    assert run.code == 1
    assert "verdict            DIVERGED" in run.out
    assert "recorded decision:" in run.out and "diff:" in run.out
    assert "example.com/changed: 'yes'" in run.out  # today's command body, as YAML


def test_a_gate_flag_that_changes_decisions_is_a_divergence(tmp_path: Path) -> None:
    """Replay assumes the operator's configuration: replaying under other gates diverges for that reason."""
    run = replay_cli(["--from-file", str(LIFECYCLE), "--feature-gates", "RayClusterStatusConditions=false"])
    assert run.code == 1
    assert "DIVERGED" in run.out
