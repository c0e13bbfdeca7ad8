"""Replay end to end: RayCluster runs through the real pipeline (kubesim, watcher, reconciler, status on
nats-server) replay without divergence, live and from an exported file; a changed rule diverges."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from schema.config import OperatorConfig
from services.reconciler.registry import default_reconcilers
from services.replay.archive import read_history_file
from services.replay.compare import without_id
from services.replay.history import KeyHistory
from services.replay.replayer import Replayer
from tests.e2e.pipeline import running_pipeline
from tests.replays import scenarios
from tests.unit.replay.clirun import replay_cli_async
from tests.unit.replay.nondeterminism import guarded
from tests.unit.replay.test_determinism import encoded, reversed_entries
from tests.unit.replay.test_divergence import DEFAULT_REQUEUE, slower_requeue


def assert_deterministic(history: KeyHistory) -> None:
    """Every recorded step's reconcile, run again on the same snapshot (reversed, guarded), agrees."""
    config = OperatorConfig()
    again = guarded(default_reconcilers())
    for step in Replayer(config=config, keep_snapshots=True).iter_steps(history):
        assert step.snapshot is not None and step.decision is not None
        second = again[history.key.kind](reversed_entries(step.snapshot), step.issued_at, config)
        # Reconcile leaves ids empty; the replay gives them only to what the worker published.
        first = msgspec.structs.replace(step.decision, commands=tuple(map(without_id, step.decision.commands)))
        assert encoded(second) == encoded(first), f"step {step.index} is not deterministic"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_lifecycle_replays_live_and_from_an_export(tmp_path: Path, db_url: str) -> None:
    """Apply, scale, suspend, resume, scale down, delete."""
    async with running_pipeline(tmp_path, db_url=db_url) as p:
        key = await scenarios.lifecycle(p)
        history = await scenarios.settled_history(p, key)
        url = p.nats.url
        rules = {rule.split(":")[0] for d in history.decisions for rule in d.batch.rules}
        assert {"4.2/scale-up", "4.2/suspend-delete-all-pods", "4.5/state"} <= rules

        live = await replay_cli_async(["RayCluster", f"{key.namespace}/{key.name}", "--nats-url", url])
        assert live.code == 0, live.out + live.err
        scenarios.assert_every_decision_matched(live.out, history)

        exported = tmp_path / "lifecycle.yaml"
        export = await replay_cli_async(
            ["export", "RayCluster", f"{key.namespace}/{key.name}", "-o", str(exported), "--nats-url", url]
        )
        assert export.code == 0, export.err
        document = read_history_file(exported)
        assert document.history().decisions[: len(history.decisions)] == history.decisions
        from_file = await replay_cli_async(["--from-file", str(exported)])
        assert from_file.code == 0 and "0 diverged" in from_file.out

        result = Replayer().replay_history(document.history())
        assert result.divergences == () and len(result.steps) >= len(history.decisions)
        assert_deterministic(history)

        idle = [
            i
            for i, d in enumerate(history.decisions, start=1)
            if d.batch.wake_at is not None and d.batch.wake_at - d.batch.issued_at == DEFAULT_REQUEUE
        ]
        changed = Replayer(reconcilers={"RayCluster": slower_requeue}).replay_history(
            history, raise_on_divergence=False
        )
        assert [d.step for d in changed.divergences] == idle
        diverged = await replay_cli_async(
            ["RayCluster", f"{key.namespace}/{key.name}", "--nats-url", url], reconcilers={"RayCluster": slower_requeue}
        )
        assert diverged.code == 1 and "~ wake_at:" in diverged.out


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_recreated_name_incarnations_and_the_upgrade_rehearsal(tmp_path: Path, db_url: str) -> None:
    """Default settings (in-flight withholding on): a scaled cluster and a re-created name."""
    async with running_pipeline(tmp_path, db_url=db_url) as p:
        scaled = await scenarios.settled_history(p, await scenarios.scaling(p))
        assert Replayer().replay_history(scaled).divergences == ()
        assert_deterministic(scaled)
        key = await scenarios.recreated(p)
        history = await scenarios.settled_history(p, key, incarnations=2)
        first, second = Replayer().replay_history(history).incarnations
        url = p.nats.url
        for uid, other in ((first, second), (second, first)):
            run = await replay_cli_async(["RayCluster", f"{key.namespace}/{key.name}", "--uid", uid, "--nats-url", url])
            assert run.code == 0, run.err
            assert f"uid {uid[:8]}" in run.out and f"uid {other[:8]}" not in run.out
        assert_deterministic(history)

        rehearsal = await replay_cli_async(["--all", "--since", "1h", "--nats-url", url], now=scenarios_now())
        assert rehearsal.code == 0, rehearsal.out + rehearsal.err
        assert "replayed 2 key(s)" in rehearsal.out and "0 key(s) diverged" in rehearsal.out


def scenarios_now() -> datetime:
    return datetime.now(UTC)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_rayjob_and_rayservice_histories_replay(tmp_path: Path, db_url: str) -> None:
    """The other kinds the registry reconciles: a RayJob that runs to Complete (with a dashboard
    observation among its inputs) and a RayService up to its cluster's head, both deleted."""
    async with running_pipeline(tmp_path, db_url=db_url) as p:
        for scenario in (scenarios.rayjob, scenarios.rayservice):
            key = await scenario(p)
            history = await scenarios.settled_history(p, key)
            assert_deterministic(history)
            run = await replay_cli_async([key.kind, f"{key.namespace}/{key.name}", "--nats-url", p.nats.url])
            assert run.code == 0, run.out + run.err
            scenarios.assert_every_decision_matched(run.out, history)
        assert (
            "OBSERVED rayjob"
            in (await replay_cli_async(["RayJob", "default/replay-rayjob", "--nats-url", p.nats.url])).out
        )
