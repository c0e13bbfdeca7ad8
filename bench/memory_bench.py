"""Memory of each process against its budget in docs/memory.md.

The stack of ``pipeline_bench.py`` (nats-server under the local ``GOMEMLIMIT``, kubesim with kubelet
``instant``, the watcher's three roles, the status service on SQLite, one reconciler, each its own
process) is started and left idle for ``--settle`` seconds: every process's peak RSS then is its idle
figure. Then ``--clusters`` RayClusters (1 head + 3 workers) are created at once and followed until all
are ready: every process's peak RSS through the burst is its figure at N. Each is printed beside the
budget the docs give it (base + per 1,000 RayClusters), and the sums beside the aims: the raybus Python
processes together at most 1.5 times the Kopf peer's peak (``--peer``: the same two figures of
``bench/peer/operator.py`` in the same run), nats-server at most 200 MB, the idle stack at most 250 MB.
kubesim is not counted. A figure over its budget is marked, never failed: budgets are read, not asserted.

Run: ``.venv/bin/python bench/memory_bench.py [--clusters 1000] [--peer /tmp/peervenv/bin/python]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline_bench import Stack, burst, peer_stack, stack, stack_dir

REPO = Path(__file__).resolve().parent.parent
BUDGETS = REPO / "docs" / "memory.md"

PYTHON_OVER_PEER = 1.5
"""Aim: the raybus Python processes' peak RSS summed, at most this many times the peer's."""
NATS_AIM_MB = 200.0
"""Aim: nats-server's peak RSS at 1,000 RayClusters under its local memory limit."""
IDLE_AIM_MB = 250.0
"""Aim: the idle stack's peak RSS summed (nats-server and the five raybus processes)."""


@dataclass(frozen=True)
class Budget:
    """A process's written budget: peak RSS idle, and what 1,000 RayClusters add."""

    base_mb: float
    per_thousand_mb: float

    def at(self, clusters: int) -> float:
        """The budget with ``clusters`` RayClusters."""
        return self.base_mb + self.per_thousand_mb * clusters / 1000


ROW = re.compile(r"^\|\s*`([\w-]+)`\s*\|\s*([\d.]+)\s*MB\s*\|\s*([\d.]+)\s*MB\s*\|")


def read_budgets(path: Path = BUDGETS) -> dict[str, Budget]:
    """The budget table of docs/memory.md: rows ``| `process` | base MB | per 1,000 MB | ...``."""
    budgets = {}
    for line in path.read_text().splitlines():
        match = ROW.match(line)
        if match:
            budgets[match[1]] = Budget(float(match[2]), float(match[3]))
    return budgets


def peaks(s: Stack) -> dict[str, float]:
    """Every process's peak RSS so far (MB)."""
    return {p.name: p.usage()[1] for p in s.procs if p.name != "kubesim"}


Figures = dict[str, float]


def idle_then_burst(s: Stack, kubeconfig: Path, clusters: int, settle: float) -> tuple[Figures, Figures, Figures]:
    """Per process: peak RSS once idle for ``settle`` seconds, peak RSS through the burst of ``clusters``,
    and the burst's CPU seconds."""
    time.sleep(settle)
    idle = peaks(s)
    r = burst(s, kubeconfig, clusters, threads=4, timeout=1800)
    if r["ready"] != clusters:
        print(f"only {r['ready']}/{clusters} RayClusters ready: the figures at N are partial", file=sys.stderr)
    own = {name: figures for name, figures in r["processes"].items() if name != "kubesim"}
    return idle, {n: f["peak_rss_mb"] for n, f in own.items()}, {n: f["cpu_s"] for n, f in own.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds the stack stays idle before the burst")
    parser.add_argument("--peer", type=Path, metavar="PYTHON", help="also measure the Kopf peer with this interpreter")
    args = parser.parse_args()
    budgets = read_budgets()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    print(f"machine: {platform.platform()}, python {platform.python_version()}, commit {commit.stdout.strip() or '?'}")
    print(f"load average: {os.getloadavg()[0]:.1f}; nats-server GOMEMLIMIT from the stack (override: GOMEMLIMIT=...)")
    peer_peak = None
    if args.peer:
        with stack_dir("memory-peer-") as tmp, peer_stack(tmp, args.peer) as (s, kubeconfig):
            idle, busy, _ = idle_then_burst(s, kubeconfig, args.clusters, args.settle)
        peer_peak = busy["peer"]
        print(f"\npeer (Kopf, one process): idle {idle['peer']:.0f} MB, at {args.clusters} {peer_peak:.0f} MB")
    with stack_dir("memory-bench-") as tmp, stack(tmp, 1, watcher_args=["--qps", "0"]) as (s, _, kubeconfig):
        idle, busy, cpu = idle_then_burst(s, kubeconfig, args.clusters, args.settle)
    print(f"\nraybus, peak RSS per process (budget: docs/memory.md; {args.clusters} RayClusters)")
    print(f"  {'process':<14} {'idle':>8} {'budget':>8}   {'at N':>8} {'budget':>8}")
    for name in busy:
        budget = budgets.get(re.sub(r"-\d+$", "", name))  # a replica's figure against its stage's budget
        idle_budget = f"{budget.base_mb:6.0f} MB" if budget else "       —"
        busy_budget = f"{budget.at(args.clusters):6.0f} MB" if budget else "       —"
        over = []
        if budget and idle[name] > budget.base_mb:
            over.append("idle over budget")
        if budget and busy[name] > budget.at(args.clusters):
            over.append("over budget at N")
        print(
            f"  {name:<14} {idle[name]:5.0f} MB {idle_budget}   {busy[name]:5.0f} MB {busy_budget}   {', '.join(over)}"
        )
    python = sum(mb for name, mb in busy.items() if name != "nats-server")
    idle_sum = sum(idle.values())
    print(f"  Python processes at N: {python:.0f} MB", end="")
    if peer_peak:
        print(f" = {python / peer_peak:.2f} times the peer's {peer_peak:.0f} MB (aim ≤ {PYTHON_OVER_PEER} times)")
    else:
        print(" (no peer run)")
    print(
        f"  nats-server at N: {busy['nats-server']:.0f} MB (aim ≤ {NATS_AIM_MB:.0f} MB at 1,000), "
        f"{cpu['nats-server']:.1f} CPU-s through the burst (raybus's Python processes: "
        f"{sum(c for n, c in cpu.items() if n != 'nats-server'):.1f})"
    )
    print(f"  idle stack: {idle_sum:.0f} MB (aim ≤ {IDLE_AIM_MB:.0f} MB); at N: {sum(busy.values()):.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
