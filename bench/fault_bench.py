"""Fault bench: RayClusters created in bursts while each component in turn is killed with SIGKILL.

The run of ``tests/e2e/faults.py`` at full size (defaults: 150 RayClusters of 1 head + 3 workers, then 50
scaled to 1 worker and 25 deleted while the killed watcher's batches wait for their redelivery), every
component its own process: nats-server, kubesim (kubelet ``instant``), ``raybus watcher``, two
``raybus reconciler`` workers (a third replaces the killed one) and ``raybus status`` (SQLite).

Figures: Pod creates against the minimum (each cluster's head and 3 workers once), extra creates, Pod
names created twice, Pods left for deleted clusters, seconds from each kill until every cluster created
so far was ready again, seconds from the scale-downs and deletions until everything converged and every
consumer drained (the killed watcher's batches come back after the 30 s ack wait), components unhealthy
at the end, dead letters.

Run: ``.venv/bin/python bench/fault_bench.py [--clusters 150] [--scaled 50] [--deleted 25] [--runs 1]``.

``--node-loss`` runs ``tests/topology/nodeloss.py`` instead, N times: the stack on a 3-node JetStream
cluster (3 replicas per stream), a burst of ``--per-burst`` RayClusters before each kill -9 of the
leader of the meta group, ``RAYBUS_EVENTS``, ``RAYBUS_COMMANDS`` and the leases bucket, then the last
``--deleted`` clusters deleted (``--quorum-loss`` adds a last burst with two nodes down for longer than
a lease lives). Per run: seconds from each kill until the bus answered and until every
cluster converged, the longest time each service's lease group held no valid partition (and the bound
the topology tier asserts), consumers left undrained (stuck keys), Pod names created twice, Pods left
for deleted clusters.

``--burst`` runs ``faults.run_burst`` instead, N times: every cluster created at once, a reconciler, the
watcher, nats-server and the status service killed with SIGKILL (and restarted) as 10, 30, 50 and 70 % of
the clusters have Pods, the scale-downs and deletions right after the last kill. Per run: the clusters
stuck (not converged within ``--bound`` seconds of the last kill, each with what differs), the seconds
from the last kill until every surviving cluster converged, Pod names created twice, Pods left for
deleted clusters; then the runs with stuck clusters and the spread of convergence times.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.e2e.faults import describe, describe_burst, fault_stack, run_burst, run_faults  # noqa: E402
from tests.topology.nodeloss import QUORUM, VICTIMS, run_node_losses  # noqa: E402
from tests.topology.nodeloss import describe as describe_node_loss  # noqa: E402
from tests.topology.stack import cluster_stack  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=150)
    parser.add_argument("--scaled", type=int, default=50)
    parser.add_argument("--deleted", type=int, default=25)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600, help="seconds each wait of a run may take")
    parser.add_argument("--node-loss", action="store_true", help="the node-loss runs on a 3-node NATS cluster")
    parser.add_argument("--per-burst", type=int, default=25, help="RayClusters before each kill (--node-loss)")
    parser.add_argument(
        "--quorum-loss", action="store_true", help="end each node-loss run with two nodes down past a lease TTL"
    )
    parser.add_argument("--burst", action="store_true", help="every cluster at once, the kills while they come up")
    parser.add_argument(
        "--bound",
        type=float,
        default=300,
        help="seconds after the last kill before a cluster counts as stuck (--burst)",
    )
    args = parser.parse_args()
    _print_setting()
    if args.burst:
        return burst_runs(args)
    if args.node_loss:
        victims = (*VICTIMS, QUORUM) if args.quorum_loss else VICTIMS
        return node_loss_runs(
            args.runs, per_burst=args.per_burst, deleted=args.deleted, timeout=args.timeout, victims=victims
        )
    failed = 0
    for run in range(1, args.runs + 1):
        with run_folder("raybus-fault-") as tmp, fault_stack(Path(tmp)) as stack:
            figures = run_faults(
                stack, clusters=args.clusters, scaled=args.scaled, deleted=args.deleted, timeout=args.timeout
            )
        summary = describe(figures)
        print(f"\nrun {run}:")
        for name, value in summary.items():
            print(f"  {name:<46} {value}")
        if figures.created_twice:
            print(f"  {'names created twice':<46} {sorted(figures.created_twice)[:10]}")
        failed += bool(figures.left_for_deleted or figures.created_twice or figures.unhealthy)
    return 1 if failed else 0


@contextlib.contextmanager
def run_folder(prefix: str) -> Iterator[str]:
    """A run's folder (its processes' logs): removed after a run that ended, kept after one that raised,
    so that what went wrong can be read."""
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        yield folder
    except BaseException:
        print(f"the run failed; its logs are kept in {folder}", file=sys.stderr)
        raise
    shutil.rmtree(folder, ignore_errors=True)


def _print_setting() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    cpus = len(os.sched_getaffinity(0))
    print(f"machine: {platform.platform()}, {cpus} cpus, python {platform.python_version()}")
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {commit.stdout.strip()}")


def node_loss_runs(runs: int, *, per_burst: int, deleted: int, timeout: float, victims: tuple[str, ...]) -> int:
    """The node-loss scenario ``runs`` times; 1 when a run duplicated, stranded or exceeded the gap bound."""
    failed = 0
    for run in range(1, runs + 1):
        with run_folder("raybus-node-loss-") as tmp, cluster_stack(Path(tmp)) as stack:
            figures = run_node_losses(stack, per_burst=per_burst, deleted=deleted, timeout=timeout, victims=victims)
        print(f"\nnode-loss run {run}:")
        for name, value in describe_node_loss(figures).items():
            print(f"  {name:<34} {value}")
        failed += bool(
            figures.created_twice
            or figures.left_for_deleted
            or figures.undrained
            or figures.unhealthy
            or figures.longest_gap > figures.gap_bound
        )
    return 1 if failed else 0


def burst_runs(args: argparse.Namespace) -> int:
    """``--runs`` burst runs, each on a fresh stack; 1 when any run had a stuck cluster, a Pod name created
    twice, a Pod left for a deleted cluster or an unhealthy component."""
    converged: list[float] = []
    failed = 0
    for run in range(1, args.runs + 1):
        with run_folder("raybus-burst-") as tmp, fault_stack(Path(tmp)) as stack:
            figures = run_burst(
                stack, clusters=args.clusters, scaled=args.scaled, deleted=args.deleted, bound=args.bound
            )
        print(f"\nburst run {run}:")
        for name, value in describe_burst(figures).items():
            print(f"  {name:<46} {value}")
        for line in figures.stuck[:10]:
            print(f"  stuck: {line}")
        if figures.created_twice:
            print(f"  {'names created twice':<46} {sorted(figures.created_twice)[:10]}")
        if figures.converge_after_last_kill is not None:
            converged.append(figures.converge_after_last_kill)
        failed += bool(figures.stuck or figures.created_twice or figures.left_for_deleted or figures.unhealthy)
    print(f"\n{args.runs} runs: {failed} with a failure; {args.runs - len(converged)} with stuck clusters")
    if converged:
        print(
            f"seconds from the last kill to convergence: min {min(converged):.1f}, "
            f"median {statistics.median(converged):.1f}, max {max(converged):.1f}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
