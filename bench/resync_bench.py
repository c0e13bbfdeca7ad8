"""Resync benchmark: what deciding every idle key again costs, in CPU seconds per minute per process.

N RayClusters (1 head + 1 worker) are created at once through the whole stack (``pipeline_bench.stack``:
every component its own process) and brought to ``ready``; after ``--settle`` seconds without a change,
each process's CPU seconds are read over ``--window`` seconds in which nothing happens but the keys'
timers. That is run once per ``--periods`` value (``--resync-period`` of the reconciler, 0 = resync off:
only KubeRay's own 300 s RayCluster requeue is left), each on a fresh stack.

The resync rate is what costs: a key is decided again every half to all of the period (0.75 of it on average), so N
keys at a period P make N / (0.75 P) resyncs per second, and 1,000 keys at 30 s are the rate of 10,000
keys at the default 300 s (each resync reads its key's snapshot, reconciles it, and publishes nothing when
nothing changed: one KV read, one schedule). Figures: per process, CPU-s per minute in the window; the
resync ticks and the recorded decisions stored in the window (read back from the streams).

Run: ``.venv/bin/python bench/resync_bench.py [--clusters 1000] [--periods 0 30 300] [--window 120]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
from pipeline_bench import burst, progress, stack, stack_dir

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from schema import subjects  # noqa: E402
from schema.codec import decode_batch, decode_input  # noqa: E402
from schema.messages import is_resync  # noqa: E402
from services.runtime.directget import direct_batches  # noqa: E402
from services.runtime.settings import RESYNC_PERIOD_ENV  # noqa: E402


async def stored_since(nats_url: str, since: datetime) -> dict[str, int]:
    """Resync ticks and recorded decisions stored since ``since``."""
    nc = await nats.connect(nats_url)
    try:
        ticks = decisions = other_inputs = 0
        async for stored in direct_batches(
            nc, subjects.EVENTS_STREAM, subject_filter=f"{subjects.PREFIX}.part.>", start_time=since
        ):
            if stored.time >= since:
                if is_resync(decode_input(stored.data)):
                    ticks += 1
                else:
                    other_inputs += 1
        async for stored in direct_batches(
            nc, subjects.COMMANDS_STREAM, subject_filter=subjects.STORED_COMMANDS_WILDCARD, start_time=since
        ):
            if stored.time >= since and not decode_batch(stored.data).report:
                decisions += 1
        return {"resync_ticks": ticks, "other_inputs": other_inputs, "recorded_decisions": decisions}
    finally:
        await nc.close()


def run(clusters: int, period: float, settle: float, window: float, timeout: float) -> dict[str, Any]:
    os.environ[RESYNC_PERIOD_ENV] = str(period)
    with stack_dir("resync-bench-") as tmp, stack(tmp, 1, watcher_args=["--qps", "0"]) as (s, nats_url, kubeconfig):
        ready = burst(s, kubeconfig, clusters, threads=4, timeout=timeout)
        started = time.perf_counter()
        progress(f"all {ready['ready']} ready; settling {settle:.0f} s", started)
        time.sleep(settle)
        before = {p.name: p.usage()[0] for p in s.procs}
        since = datetime.now(UTC)
        progress(f"measuring {window:.0f} s", started)
        time.sleep(window)
        after = {p.name: p.usage()[0] for p in s.procs}
        stored = asyncio.run(stored_since(nats_url, since))
    per_minute = {name: (after[name] - before[name]) * 60.0 / window for name in after}
    figures = {"period": period, "ready": ready["ready"], "ready_in_s": ready["all_ready_in_s"], "cpu": per_minute}
    return {**figures, **stored}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--periods", type=float, nargs="+", default=[0.0, 30.0, 300.0])
    parser.add_argument("--settle", type=float, default=60.0, help="seconds after all are ready before measuring")
    parser.add_argument("--window", type=float, default=120.0, help="seconds measured")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    print(f"machine: {platform.platform()}, {len(os.sched_getaffinity(0))} cpus, python {platform.python_version()}")
    print(f"load average: {os.getloadavg()[0]:.1f}")
    for period in args.periods:
        r = run(args.clusters, period, args.settle, args.window, args.timeout)
        rate = r["resync_ticks"] / args.window
        print(
            f"\n{args.clusters} idle RayClusters, resync period {period:g} s ({'off' if not period else 'on'}): "
            f"ready in {r['ready_in_s']:.1f} s; in {args.window:.0f} s: {r['resync_ticks']} resync ticks "
            f"({rate:.1f}/s), {r['recorded_decisions']} recorded decisions, {r['other_inputs']} other inputs"
        )
        for name, cpu in r["cpu"].items():
            print(f"  {name:<14} {cpu:6.2f} CPU-s per minute")
        own = sum(cpu for name, cpu in r["cpu"].items() if name != "kubesim")
        print(f"  {'operator sum':<14} {own:6.2f} CPU-s per minute (every process but kubesim)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
