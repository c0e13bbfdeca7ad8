"""What the applier's content and freshness checks cost per command (``services/edge/apply/provenance.py``,
``services/edge/apply/freshness.py``), against the pure reconcile that made the commands.

Every decision of a RayCluster's life from nothing to converged (``reconcile_bench``'s world, its cluster of
1 head + ``--workers`` workers) is checked as the applier checks it: one ``ContentCheck`` per batch on
facts holding the RayCluster, ``problem`` for every command, the freshness check once per batch. Figures,
each the best of ``--repeat`` timed loops:

- the checks of a whole life, per cluster and per command, next to the reconciles that decided it;
- one worker Pod create alone: the first of a batch (it derives the group's Pod) and the next ones;
- the freshness check of one batch; with ``--nats-url``, also as the applier makes it, reading and raising
  the key's revision in KV ``raybus-applied`` of that server (a get and a put per batch: wall time).

With ``--workers 3`` a cluster is ``pipeline_bench``'s (``small_cluster``): the per-cluster figure times
1,000 is what the checks add to its 1,000-cluster burst.

Run: ``.venv/bin/python bench/provenance_bench.py [--workers 3] [--seconds 1] [--repeat 3] [--nats-url URL]``.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import nats  # noqa: E402
from reconcile_bench import KEY, NOW, cluster  # noqa: E402

from schema.config import OperatorConfig  # noqa: E402
from schema.decision import Decision, Snapshot  # noqa: E402
from schema.messages import CommandBatch, CreateObject, PatchStatus  # noqa: E402
from services.edge.apply.freshness import Freshness  # noqa: E402
from services.edge.apply.provenance import ContentCheck  # noqa: E402
from services.reconciler.raycluster import reconcile  # noqa: E402
from services.runtime.settings import BusSettings, PartitionSettings  # noqa: E402
from services.runtime.topology import open_buckets  # noqa: E402


class Objects:
    """The applier's facts as far as the content check reads them: objects by kind and name."""

    def __init__(self, objects: dict[str, dict[str, dict[str, Any]]]) -> None:
        self.objects = objects

    def find(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.objects.get(kind, {}).get(name)

    def recently_deleted(self, kind: str, namespace: str, name: str) -> bool:
        return False


def life(workers: int, config: OperatorConfig) -> list[tuple[Snapshot, Decision]]:
    """Every (snapshot, decision) from a new RayCluster to a converged one, pods Running/Ready at once."""
    objects: dict[str, dict[str, dict[str, Any]]] = {"RayCluster": {"bench": cluster(workers)}}
    steps: list[tuple[Snapshot, Decision]] = []
    revision = 1
    for _ in range(20):
        snapshot = Snapshot(key=KEY, entries={k: dict(v) for k, v in objects.items()}, revision=revision)
        decision = reconcile(snapshot, NOW, config)
        if not decision.commands:
            return steps
        steps.append((snapshot, decision))
        for command in decision.commands:
            revision += 1
            if isinstance(command, CreateObject):
                body = dict(command.body)
                body["metadata"] = {**body["metadata"], "uid": f"uid-{revision}", "resourceVersion": str(revision)}
                if command.target.kind == "Pod":
                    body["status"] = {
                        "phase": "Running",
                        "podIP": "10.1.0.1",
                        "conditions": [{"type": "Ready", "status": "True"}],
                    }
                objects.setdefault(command.target.kind, {})[body["metadata"]["name"]] = body
            elif isinstance(command, PatchStatus):
                cr = objects["RayCluster"]["bench"]
                objects["RayCluster"]["bench"] = {**cr, "status": {**(cr.get("status") or {}), **command.status}}
    raise SystemExit("bench cluster did not converge")


def per_call(fn: Callable[[], object], seconds: float, repeat: int) -> float:
    """Best seconds per call over ``repeat`` loops of about ``seconds`` each."""
    best = float("inf")
    for _ in range(repeat):
        calls, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            fn()
            calls += 1
        best = min(best, elapsed / calls)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--nats-url", default="", help="also time the freshness check with its KV bucket there")
    args = parser.parse_args()
    config = OperatorConfig()
    steps = life(args.workers, config)
    facts = [Objects({k: dict(v) for k, v in snapshot.entries.items()}) for snapshot, _ in steps]
    commands = sum(len(decision.commands) for _, decision in steps)

    def check_life() -> None:
        for found, (_, decision) in zip(facts, steps, strict=True):
            content = ContentCheck(KEY, found, config, decision.commands)
            for command in decision.commands:
                assert not content.problem(command)

    def reconcile_life() -> None:
        for snapshot, _ in steps:
            reconcile(snapshot, NOW, config)

    pods = [
        (found, decision, command)
        for found, (_, decision) in zip(facts, steps, strict=True)
        for command in decision.commands
        if isinstance(command, CreateObject) and command.body["metadata"]["labels"].get("ray.io/node-type") == "worker"
    ]
    found, decision, pod = pods[0]
    warm = ContentCheck(KEY, found, config, decision.commands)
    warm.problem(pod)
    fresh = Freshness()
    batch = CommandBatch(id="b", key=KEY, issued_at=datetime.now(UTC), commands=decision.commands, snapshot_revision=9)

    def freshness() -> None:
        if not fresh.problem(batch):
            fresh.applied(batch, verified=True)

    checks = per_call(check_life, args.seconds, args.repeat)
    reconciles = per_call(reconcile_life, args.seconds, args.repeat)
    first = per_call(
        lambda: ContentCheck(KEY, found, config, decision.commands).problem(pod), args.seconds, args.repeat
    )
    next_pod = per_call(lambda: warm.problem(pod), args.seconds, args.repeat)
    fresh_cost = per_call(freshness, args.seconds, args.repeat)
    print(f"{platform.platform()}, python {platform.python_version()}")
    print(f"a RayCluster of 1 head + {args.workers} workers: {len(steps)} decisions, {commands} commands in its life")
    print(f"  checks of its life            {checks * 1e6:9.1f} µs  ({checks / commands * 1e6:.1f} µs per command)")
    print(f"  reconciles of its life        {reconciles * 1e6:9.1f} µs  (checks = {checks / reconciles:.0%} of them)")
    print(f"  first worker Pod of a batch   {first * 1e6:9.1f} µs  (derives the group's Pod)")
    print(f"  next worker Pod of the batch  {next_pod * 1e6:9.1f} µs")
    print(f"  freshness of one batch        {fresh_cost * 1e6:9.1f} µs")
    print(f"  1,000 such clusters           {checks * 1000:9.2f} CPU-s of checks")
    if args.nats_url:
        stored = asyncio.run(stored_freshness(args.nats_url, batch, args.seconds, args.repeat))
        print(f"  freshness with KV raybus-applied {stored * 1e6:6.1f} µs  (wall time per batch: a get and a put)")
    return 0


async def stored_freshness(url: str, batch: CommandBatch, seconds: float, repeat: int) -> float:
    """Wall time of ``Freshness.judge`` and the write it starts (``Freshness.stored``) per batch on the KV
    bucket of the server at ``url``, best of ``repeat`` loops: each batch a newer revision, so each reads
    and raises the key's entry."""
    nc = await nats.connect(url)
    try:
        buckets = await open_buckets(nc, bus=BusSettings(), partitions=PartitionSettings())
        fresh = Freshness(floors=buckets.applied)
        revision = batch.snapshot_revision
        best = float("inf")
        for _ in range(repeat):
            calls, started = 0, time.perf_counter()
            while time.perf_counter() - started < seconds:
                revision += 1
                newer = CommandBatch(
                    id=f"b{revision}", key=batch.key, issued_at=batch.issued_at, commands=(), snapshot_revision=revision
                )
                assert not await fresh.judge(newer, verified=True)
                await fresh.stored(batch.key)
                calls += 1
            best = min(best, (time.perf_counter() - started) / calls)
        return best
    finally:
        await nc.close()


if __name__ == "__main__":
    sys.exit(main())
