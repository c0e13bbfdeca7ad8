"""Invariant 3 on the histories recorded from real pipeline runs (``tests/replays/``): today's reconcile
reproduces every recorded command and wake-up, through the library and through the CLI."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgspec
import pytest

from schema.config import OperatorConfig
from services.reconciler.worker.decide import LOGIC_VERSION
from services.reconciler.worker.inflight import in_flight_key
from services.replay.archive import HistoryFile
from services.replay.history import KeyHistory, RecordedDecision
from services.replay.replayer import Replayer, StepFilter
from tests.unit.replay.clirun import replay_cli
from tests.unit.replay.conftest import RECORDED, REPLAYS, load, recorded_params


def test_every_recorded_decision_is_reproduced(recorded: HistoryFile) -> None:
    history = recorded.history()
    result = Replayer(config=recorded.operator_config or OperatorConfig()).replay_history(history)
    assert result.divergences == ()
    assert [s.verdict for s in result.steps] == ["match"] * len(history.decisions)
    assert len(result.steps) == len(history.decisions) > 5
    assert result.unconsumed == ()  # each file ends settled: every input reconciled
    assert not result.window.truncated


@pytest.mark.parametrize("path", recorded_params())
def test_ids_of_an_older_logic_version_are_a_logic_change_not_a_divergence(path: Path) -> None:
    """The files were recorded under logic_version 1, whose command ids followed other rules: replay says
    so per step and in the summary, compares the contents, and does not call it a divergence."""
    recorded = load(path)
    history = recorded.history()
    assert {d.batch.logic_version for d in history.decisions} == {1} and LOGIC_VERSION > 1
    result = Replayer(config=recorded.operator_config or OperatorConfig()).replay_history(history)
    changed = [s for s in result.steps if s.logic_change]
    assert changed and all(s.verdict == "match" for s in changed)
    for step in changed:
        assert step.replayed is not None and step.replayed.id != step.recorded.id
        assert f"recorded with logic_version 1, today's is {LOGIC_VERSION}" in step.logic_change
    for step in result.steps:
        if not step.logic_change:  # no commands kept, so no ids to differ
            assert step.replayed is not None and len(step.replayed.commands) == len(step.withheld)
    run = replay_cli(["--from-file", str(path)])
    assert run.code == 0 and "0 diverged" in run.out
    assert f"{len(changed)} decision(s) recorded with logic_version 1 have other command ids today" in run.out
    assert "a logic change, not a divergence" in run.out


def test_under_the_same_logic_version_ids_are_compared(recorded: HistoryFile) -> None:
    """The gate works both ways: the same recorded decisions claimed for today's logic version diverge
    on their ids alone."""
    history = recorded.history()
    today = msgspec.structs.replace(
        history,
        decisions=tuple(
            msgspec.structs.replace(d, batch=msgspec.structs.replace(d.batch, logic_version=LOGIC_VERSION))
            for d in history.decisions
        ),
    )
    result = Replayer(config=recorded.operator_config or OperatorConfig()).replay_history(
        today, raise_on_divergence=False
    )
    assert result.divergences
    step = next(s for s in result.steps if s.diverged)
    assert any(line.strip().startswith("id: ") for line in step.diff)
    assert not any(s.logic_change for s in result.steps)


def recorded_today(history: KeyHistory, config: OperatorConfig) -> KeyHistory:
    """``history`` as today's worker would have recorded it: today's decisions, withheld where the
    recording withheld, each withheld command named by the id of its twin published before."""
    ids: dict[str, str] = {}
    decisions: list[RecordedDecision] = []
    for step, recorded in zip(Replayer(config=config).iter_steps(history), history.decisions, strict=True):
        assert step.replayed is not None
        kept = step.kept_commands()
        for command in kept:
            ids.setdefault(in_flight_key(command), command.id)
        twins = tuple(ids[in_flight_key(c)] for c in step.withheld_commands())
        batch = msgspec.structs.replace(step.replayed, commands=kept, suppressed=twins)
        decisions.append(msgspec.structs.replace(recorded, batch=batch))
    return msgspec.structs.replace(history, decisions=tuple(decisions))


def test_a_history_recorded_today_replays_with_its_ids(recorded: HistoryFile) -> None:
    """Under today's logic version ids are compared, a withheld command is found by its twin's content,
    and the same decisions recomputed get the same ids (and batch ids: JetStream would de-duplicate)."""
    config = recorded.operator_config or OperatorConfig()
    today = recorded_today(recorded.history(), config)
    result = Replayer(config=config).replay_history(today)
    assert [s.verdict for s in result.steps] == ["match"] * len(today.decisions)
    assert not any(s.logic_change for s in result.steps)
    assert [s.replayed.id for s in result.steps if s.replayed] == [d.batch.id for d in today.decisions]
    withheld = sum(len(d.batch.suppressed) for d in recorded.decisions)
    assert sum(len(s.withheld) for s in result.steps) == withheld


def test_recorded_histories_cover_the_scenarios() -> None:
    """The files hold what the issue asks for: scaling, suspend/resume, deletion, a re-created name."""
    assert {p.stem for p in RECORDED} >= {
        "raycluster-sample-lifecycle",
        "raycluster-autoscaler-lifecycle",
        "raycluster-recreated",
        "raycluster-scaling",
        "rayjob-sample",
        "rayservice-sample",
    }
    kinds = {load(path).key.kind for path in RECORDED}
    assert kinds >= {"RayCluster", "RayJob", "RayService"}  # every kind the registry reconciles but RayCronJob
    withheld = load(REPLAYS / "raycluster-scaling.json").decisions
    assert sum(len(d.batch.suppressed) for d in withheld) > 0  # recorded with in-flight withholding on
    rules: Counter[str] = Counter()
    for path in RECORDED:
        for recorded in load(path).decisions:
            rules.update(rule.split(":")[0] for rule in recorded.batch.rules)
    for rule in (
        "4.2/scale-up",
        "4.2/scale-down",
        "4.2/suspend-delete-all-pods",
        "4.5/state",
        "4.2/create-head-pod",
        "5.4/job-complete",
        "5.1/deleting-remove-finalizer",
        "6.1/create-pending-cluster",
        "6.1/deleting-remove-finalizer",
    ):
        assert rules[rule] > 0, (rule, rules)
    assert len(load(REPLAYS / "raycluster-recreated.json").history().inputs) > 0
    result = Replayer().replay_history(load(REPLAYS / "raycluster-recreated.json").history())
    assert len(result.incarnations) == 2


@pytest.mark.parametrize("path", recorded_params())
def test_cli_replays_a_file_with_exit_zero(path: Path) -> None:
    run = replay_cli(["--from-file", str(path)])
    assert run.code == 0, run.out + run.err
    assert "0 diverged" in run.out
    assert "DIVERGED" not in run.out
    assert "history complete" in run.out
    assert f"recorded in {path.name}" in run.out


def test_uid_selects_one_incarnation() -> None:
    document = load(REPLAYS / "raycluster-recreated.json")
    first, second = Replayer().replay_history(document.history()).incarnations
    only_first = Replayer(only=StepFilter(uid=first)).replay_history(document.history())
    only_second = Replayer(only=StepFilter(uid=second)).replay_history(document.history())
    assert {s.uid for s in only_first.steps} == {first}
    assert {s.uid for s in only_second.steps} == {second}
    assert len(only_first.steps) + len(only_second.steps) == len(document.decisions)
    run = replay_cli(["--from-file", str(REPLAYS / "raycluster-recreated.json"), "--uid", second])
    assert run.code == 0
    assert f"uid {first[:8]}" not in run.out and f"uid {second[:8]}" in run.out
    missing = replay_cli(["--from-file", str(REPLAYS / "raycluster-recreated.json"), "--uid", "nope"])
    assert missing.code == 2 and "matches" in missing.err


def test_since_and_until_select_a_time_window() -> None:
    path = REPLAYS / "raycluster-sample-lifecycle.json"
    decisions = load(path).decisions
    middle = decisions[len(decisions) // 2].batch.issued_at
    later = Replayer(only=StepFilter(since=middle)).replay_history(load(path).history())
    earlier = Replayer(only=StepFilter(until=middle)).replay_history(load(path).history())
    assert all(s.issued_at >= middle for s in later.steps)
    assert all(s.issued_at <= middle for s in earlier.steps)
    assert len(later.steps) + len(earlier.steps) == len(decisions) + 1  # the middle one is in both
    run = replay_cli(["--from-file", str(path), "--since", middle.isoformat()])
    assert run.code == 0 and f"{len(later.steps)} decision(s) replayed" in run.out


def test_step_shows_snapshot_decision_and_rules() -> None:
    path = REPLAYS / "raycluster-sample-lifecycle.json"
    document = load(path)
    run = replay_cli(["--from-file", str(path), "--step", "2"])
    assert run.code == 0, run.err
    second = document.decisions[1].batch
    assert run.out.startswith(f"step 2 of {len(document.decisions)}: RayCluster")
    assert f"snapshot (revision {second.snapshot_revision}):" in run.out
    assert "  RayCluster:\n    replay-lifecycle:\n" in run.out  # the snapshot as YAML
    assert "decision (today's code):" in run.out
    assert "why (rules that fired, in order):" in run.out
    for rule in second.rules:
        assert f"  - {rule}\n" in run.out
    assert "recorded decision: the same" in run.out


def test_batch_seq_picks_the_step_of_a_stored_batch() -> None:
    """What ``raybus history`` can point at: a transition's result carries its batch's sequence."""
    path = REPLAYS / "raycluster-sample-lifecycle.json"
    decisions = load(path).decisions
    run = replay_cli(["--from-file", str(path), "--batch-seq", str(decisions[6].seq)])
    assert run.code == 0 and run.out.startswith(f"step 7 of {len(decisions)}")
    missing = replay_cli(["--from-file", str(path), "--batch-seq", "999999"])
    assert missing.code == 2 and "no recorded decision at commands-stream sequence 999999" in missing.err


def test_at_picks_the_last_step_at_or_before_a_time() -> None:
    path = REPLAYS / "raycluster-sample-lifecycle.json"
    decisions = load(path).decisions
    at = decisions[4].batch.issued_at
    run = replay_cli(["--from-file", str(path), "--at", at.isoformat()])
    assert run.code == 0
    assert run.out.startswith(f"step 5 of {len(decisions)}")
    early = replay_cli(["--from-file", str(path), "--at", "2000-01-01T00:00:00Z"])
    assert early.code == 2 and "no decision" in early.err


def test_timeline_shows_inputs_with_field_diffs_and_decisions() -> None:
    run = replay_cli(["--from-file", str(REPLAYS / "raycluster-sample-lifecycle.json")])
    out = run.out
    assert "ADDED    RayCluster replay-lifecycle" in out
    assert "spec.workerGroupSpecs[0].replicas: 1 → 3" in out  # the scale-up, as a field diff
    assert "spec.suspend: ∅ → true" in out
    assert "→ create_object Pod default/replay-lifecycle-head-" in out
    assert "transition state: ready → suspended (Suspended)" in out
    assert "→ delete_collection Pod default -l ray.io/cluster=replay-lifecycle" in out
    assert "recorded: same" in out
    assert "rules 4.2/create-head-pod" in out
