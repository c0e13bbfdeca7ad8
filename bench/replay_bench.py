"""``raybus replay`` benchmark: inputs (events) replayed per second over a long recorded history.

The history is recorded from a real pipeline run (nats-server, kubesim, watcher, reconciler, status in
one process): one
RayCluster of the sample scaled 0 → ``--workers`` → 0 over and over until its key has at least
``--events`` inputs, then deleted; it is exported (``raybus replay export``'s format) to ``--history``
and reused by later runs (``--rerecord`` to record again).

Figures, each the best of ``--repeat`` runs over the whole history:
- replay: ``Replayer().replay_history`` end to end (snapshot rebuild, ``decide`` with the production
  reconcile, comparison with the recorded batch): inputs/s and decisions/s;
- rebuild: the incremental snapshot rebuild alone, and rebuilding each snapshot from scratch (what
  ``rebuild`` avoids);
- decide: the production ``draft`` alone (reconcile and the batch around it, before any command has its id)
  on the prebuilt snapshots: the floor for a full replay;
- load: decoding the export file;
- golden: replaying every recorded history of ``tests/replays/`` (RayCluster, RayJob, RayService runs).

Run: ``.venv/bin/python bench/replay_bench.py [--events 10000] [--workers 20] [--repeat 3] [--profile]``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import platform
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from schema import subjects  # noqa: E402
from schema.config import OperatorConfig  # noqa: E402
from schema.decision import Snapshot  # noqa: E402
from services.reconciler.registry import default_reconcilers  # noqa: E402
from services.reconciler.worker.decide import draft  # noqa: E402
from services.replay.archive import read_history_file, to_file, write_history  # noqa: E402
from services.replay.history import KeyHistory, entry_of  # noqa: E402
from services.replay.rebuild import SnapshotTimeline  # noqa: E402
from services.replay.replayer import Replayer  # noqa: E402

DEFAULT_HISTORY = Path(tempfile.gettempdir()) / "raybus-replay-bench-history.json"


async def record(path: Path, *, events: int, workers: int) -> None:
    """Churn one RayCluster through a real pipeline until its key has ``events`` inputs; export it."""
    from tests.e2e.pipeline import running_pipeline
    from tests.replays import scenarios

    with tempfile.TemporaryDirectory() as tmp:
        async with running_pipeline(Path(tmp)) as p:
            cluster = scenarios.Driver(p, scenarios.sample("ray-cluster.sample.yaml", name="bench-churn"))
            await cluster.create()
            await cluster.wait_ready(1)
            nc = await p.nc()
            js = nc.jetstream()
            started = time.perf_counter()
            cycles = 0
            while (await js.stream_info(subjects.EVENTS_STREAM)).state.messages < events:
                for replicas in (workers, 0):
                    await cluster.scale(replicas)
                    await cluster.wait_ready(replicas)
                cycles += 1
                if cycles % 5 == 0:
                    done = (await js.stream_info(subjects.EVENTS_STREAM)).state.messages
                    print(f"  recording: {cycles} cycles, {done} events, {time.perf_counter() - started:.0f}s")
            await nc.close()
            await cluster.delete()
            history = await scenarios.settled_history(p, cluster.key)
            document = to_file(
                history,
                exported_at=datetime.now(UTC),
                operator_config=p.settings.operator,
                source="bench/replay_bench.py (kubesim pipeline)",
                note=f"sample scaled 0 -> {workers} -> 0, {cycles} cycles",
            )
            write_history(path, document)
            print(f"recorded {path}: {len(history.inputs)} inputs, {len(history.decisions)} decisions, {cycles} cycles")


def best(repeat: int, run: Callable[[], Any]) -> float:
    """Best wall time of ``repeat`` runs, in seconds."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def rebuild_incremental(history: KeyHistory) -> None:
    timeline = SnapshotTimeline(history)
    for recorded in history.decisions:
        timeline.snapshot(recorded.batch.snapshot_revision)


def rebuild_from_scratch(history: KeyHistory) -> None:
    """Each snapshot from every write up to its revision (what ``rebuild`` avoids)."""
    writes = sorted(
        (r for r in history.inputs if entry_of(r.message) is not None),
        key=lambda r: (getattr(r.message, "kv_revision", 0), r.seq),
    )
    for recorded in history.decisions:
        entries: dict[str, dict[str, Any]] = {}
        for write in writes:
            message: Any = write.message
            if message.kv_revision > recorded.batch.snapshot_revision:
                break
            kind, name = entry_of(message) or ("", "")
            if getattr(message, "event_type", "") == "DELETED":
                entries.get(kind, {}).pop(name, None)
            else:
                entries.setdefault(kind, {})[name] = getattr(message, "object", None) or message.data
        Snapshot(key=history.key, entries=entries, revision=recorded.batch.snapshot_revision)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=Path, default=DEFAULT_HISTORY, help="export file (recorded if missing)")
    parser.add_argument("--rerecord", action="store_true", help="record the history again")
    parser.add_argument("--events", type=int, default=10_000, help="inputs to record (at least)")
    parser.add_argument("--workers", type=int, default=20, help="workers per scale-up")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile of one replay")
    args = parser.parse_args()

    if args.rerecord or not args.history.exists():
        asyncio.run(record(args.history, events=args.events, workers=args.workers))
    load_s = best(args.repeat, lambda: read_history_file(args.history))
    document = read_history_file(args.history)
    history = document.history()
    config = document.operator_config or OperatorConfig()
    inputs, decisions = len(history.inputs), len(history.decisions)
    size_mb = args.history.stat().st_size / 1e6

    replayer = Replayer(config=config)
    result = replayer.replay_history(history)
    assert result.divergences == (), "the recorded history must replay without divergence"
    replay_s = best(args.repeat, lambda: replayer.replay_history(history))

    timeline = SnapshotTimeline(history)
    snapshots = [timeline.snapshot(d.batch.snapshot_revision) for d in history.decisions]
    reconcilers = default_reconcilers()

    def decide_all() -> None:
        for recorded, snapshot in zip(history.decisions, snapshots, strict=True):
            draft(
                reconcilers=reconcilers,
                snapshot=snapshot,
                now=recorded.batch.issued_at,
                config=config,
                sequences=recorded.batch.inputs,
            )

    decide_s = best(args.repeat, decide_all)
    incremental_s = best(args.repeat, lambda: rebuild_incremental(history))
    scratch_s = best(1, lambda: rebuild_from_scratch(history))
    golden = [read_history_file(path) for path in sorted((REPO / "tests" / "replays").glob("*.json"))]
    golden_inputs = sum(len(g.inputs) for g in golden)
    golden_decisions = sum(len(g.decisions) for g in golden)

    def replay_golden() -> None:
        for g in golden:
            Replayer(config=g.operator_config or OperatorConfig()).replay_history(g.history())

    golden_s = best(args.repeat, replay_golden)
    withheld = sum(len(d.batch.suppressed) for d in history.decisions)
    commands = sum(len(d.batch.commands) for d in history.decisions)
    pods = max(len(s.entries.get("Pod", {})) for s in snapshots)

    uname = platform.uname()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {uname.system} {uname.release} {uname.machine}, {os.cpu_count()} CPUs, load {load}")
    print(f"         Python {platform.python_version()}")
    print(f"history: {args.history} ({size_mb:.1f} MB): {inputs} inputs, {decisions} decisions, {commands} commands")
    ratio = inputs / decisions
    print(f"         (+{withheld} withheld), up to {pods} Pods in a snapshot, {ratio:.2f} inputs per decision")
    print(f"{'figure':<44} {'seconds':>8} {'inputs/s':>10} {'decisions/s':>12}")
    rows = [
        ("replay (rebuild + decide + compare)", replay_s),
        ("decide alone (draft) on prebuilt snapshots", decide_s),
        ("snapshot rebuild, incremental", incremental_s),
        ("snapshot rebuild, from scratch per decision", scratch_s),
        ("load the export file (JSON decode)", load_s),
    ]
    for label, seconds in rows:
        print(f"{label:<44} {seconds:>8.3f} {inputs / seconds:>10.0f} {decisions / seconds:>12.0f}")
    label = f"replay tests/replays/ ({len(golden)} files)"
    print(f"{label:<44} {golden_s:>8.3f} {golden_inputs / golden_s:>10.0f} {golden_decisions / golden_s:>12.0f}")
    print(f"replay overhead over decide: {(replay_s - decide_s) / decisions * 1e6:.1f} µs per decision")

    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        replayer.replay_history(history)
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
