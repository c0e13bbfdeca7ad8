"""RayCluster reconcile benchmark: decisions/s of the pure ``reconcile`` on one core.

Four figures, each the best of ``--repeat`` timed loops over a fixed snapshot:
- no-op: a converged cluster of 1 head + ``--workers`` workers (all Running/Ready, status written):
  the decision is empty; this is the steady-state cost of every watch event and timer tick. Once with
  the RayCluster object seen before (a Pod's change: what reconcile derives from the RayCluster alone is
  remembered, ``common.memo``), once with a RayCluster object new at every decision (its own change);
- fresh: the same RayCluster with no children yet: the decision creates the head Service, the head
  pod and every worker pod (the most expensive single decision);
- scale-up by one: the converged cluster with ``replicas + 1``.
The last two, like the second, decide on a RayCluster object new at every decision, as a changed spec is.
Then the scale-up once more, one decision after each of ``--pauses`` sleeps of ``--pause`` seconds (the
median): a single change on an idle stack finds the process, and the code it runs, cold.

Run: ``.venv/bin/python bench/reconcile_bench.py [--workers 100] [--seconds 2] [--repeat 3] [--pause 0.5]
[--pauses 20] [--profile]``.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import platform
import pstats
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from schema.config import OperatorConfig  # noqa: E402
from schema.decision import Decision, Snapshot  # noqa: E402
from schema.keys import ReconcileKey  # noqa: E402
from schema.messages import CreateObject, PatchStatus  # noqa: E402
from services.reconciler.common.memo import REMEMBERED  # noqa: E402
from services.reconciler.raycluster import reconcile  # noqa: E402

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
KEY = ReconcileKey(kind="RayCluster", namespace="default", name="bench")


def container(name: str, cpu: str, memory: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": "rayproject/ray:2.52.0",
        "ports": [{"containerPort": 6379, "name": "gcs-server"}, {"containerPort": 8265, "name": "dashboard"}],
        "resources": {"limits": {"cpu": cpu, "memory": memory}, "requests": {"cpu": cpu, "memory": memory}},
    }


def cluster(workers: int) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": "bench",
            "namespace": "default",
            "uid": "0b6a4c1e-0000-4000-8000-000000000001",
            "resourceVersion": "1",
            "generation": 1,
        },
        "spec": {
            "rayVersion": "2.52.0",
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [container("ray-head", "1", "5Gi")]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": "workers",
                    "replicas": workers,
                    "minReplicas": 0,
                    "maxReplicas": max(1000, workers),
                    "numOfHosts": 1,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [container("ray-worker", "1", "1Gi")]}},
                }
            ],
        },
    }


def snapshot(objects: dict[str, dict[str, dict[str, Any]]], revision: int) -> Snapshot:
    return Snapshot(key=KEY, entries=objects, revision=revision)


def converge(workers: int, config: OperatorConfig) -> dict[str, dict[str, dict[str, Any]]]:
    """Apply decisions to an in-memory world (pods become Running/Ready) until nothing is left to do."""
    objects: dict[str, dict[str, dict[str, Any]]] = {"RayCluster": {"bench": cluster(workers)}}
    revision = 1
    for _ in range(20):
        decision = reconcile(snapshot(objects, revision), NOW, config)
        if not decision.commands:
            return objects
        for command in decision.commands:
            revision += 1
            if isinstance(command, CreateObject):
                body = copy.deepcopy(command.body)
                body["metadata"].update(uid=f"uid-{revision}", resourceVersion=str(revision))
                if command.target.kind == "Pod":
                    body["status"] = {
                        "phase": "Running",
                        "podIP": "10.1.0.1",
                        "conditions": [{"type": "Ready", "status": "True"}],
                    }
                if command.target.kind == "Service":
                    for port in body["spec"]["ports"]:
                        port["targetPort"] = port["port"]
                objects.setdefault(command.target.kind, {})[body["metadata"]["name"]] = body
            elif isinstance(command, PatchStatus):
                cr = objects["RayCluster"]["bench"]
                status = dict(cr.get("status") or {})
                for key, value in command.status.items():
                    if value is None:
                        status.pop(key, None)
                    else:
                        status[key] = value
                # A write makes a new object, as it does in the snapshots the reconciler reads.
                metadata = {**cr["metadata"], "resourceVersion": str(revision)}
                objects["RayCluster"]["bench"] = {**cr, "status": status, "metadata": metadata}
    raise SystemExit("bench cluster did not converge")


def renewed(snap: Snapshot) -> list[Snapshot]:
    """Copies of ``snap`` whose RayCluster objects are new, more than ``common.memo`` remembers: deciding on
    them in turn finds nothing remembered."""
    return [
        Snapshot(
            key=snap.key,
            entries={**snap.entries, "RayCluster": {"bench": dict(snap.entries["RayCluster"]["bench"])}},
            revision=snap.revision,
        )
        for _ in range(REMEMBERED + 20)
    ]


def rate(snaps: list[Snapshot], config: OperatorConfig, *, seconds: float, repeat: int) -> tuple[float, Decision]:
    """Best decisions/s over ``repeat`` loops of about ``seconds`` each, deciding on ``snaps`` in turn."""
    decision = reconcile(snaps[0], NOW, config)
    best = 0.0
    batch = snaps * 20 if len(snaps) == 1 else snaps
    for _ in range(repeat):
        count = 0
        start = time.perf_counter()
        deadline = start + seconds
        while True:
            for snap in batch:
                reconcile(snap, NOW, config)
            count += len(batch)
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, count / (now - start))
    return best, decision


def after_pauses(snaps: list[Snapshot], config: OperatorConfig, *, pause: float, pauses: int) -> float:
    """The median seconds of one decision on each of ``snaps`` in turn, each after ``pause`` seconds asleep."""
    times = []
    for snap in (snaps * pauses)[:pauses]:
        time.sleep(pause)
        start = time.perf_counter()
        reconcile(snap, NOW, config)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pause", type=float, default=0.5, help="seconds asleep before each cold decision")
    parser.add_argument("--pauses", type=int, default=20, help="cold decisions timed")
    parser.add_argument("--profile", action="store_true", help="profile the no-op path and print the top entries")
    args = parser.parse_args()
    config = OperatorConfig()

    converged = converge(args.workers, config)
    noop = snapshot(converged, 1000)
    fresh = snapshot({"RayCluster": {"bench": cluster(args.workers)}}, 1)
    bigger = copy.deepcopy(converged)
    bigger["RayCluster"]["bench"]["spec"]["workerGroupSpecs"][0]["replicas"] = args.workers + 1
    scale = snapshot(bigger, 1001)

    print(f"machine: {platform.platform()} ({platform.machine()}), python {platform.python_version()}")
    print(f"cluster: 1 head + {args.workers} workers, {args.repeat} x {args.seconds:.1f} s per figure, best kept")
    figures = (
        ("no-op (converged)", [noop]),
        ("no-op, RayCluster new", renewed(noop)),
        ("fresh (create all)", renewed(fresh)),
        ("scale-up by one", renewed(scale)),
    )
    for label, snaps in figures:
        per_second, decision = rate(snaps, config, seconds=args.seconds, repeat=args.repeat)
        print(
            f"{label:22s} {per_second:10.0f} decisions/s  {1e6 / per_second:8.1f} us/decision  "
            f"{len(decision.commands):4d} commands"
        )
    cold = after_pauses(renewed(scale), config, pause=args.pause, pauses=args.pauses)
    print(f"{'scale-up, after a pause':22s} {'':10s} {'':12s}  {1e6 * cold:8.1f} us/decision (median of {args.pauses})")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(2000):
            reconcile(noop, NOW, config)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
