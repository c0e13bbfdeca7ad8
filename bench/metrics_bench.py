"""Metrics benchmark: CPU per counted event, the OpenTelemetry SDK's ``Counter`` against raybus's ``Tally``.

Both count under the same meter provider (a Prometheus reader, as every raybus process has), with the two
attributes most counters carry (``verb`` and ``outcome``, three series in turn). It prints the process's
CPU time per ``add``, the best of ``--rounds``, and checks that both exported the same totals.

Run: ``.venv/bin/python bench/metrics_bench.py [--adds 200000] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from opentelemetry.exporter.prometheus import PrometheusMetricReader  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from prometheus_client import REGISTRY, generate_latest  # noqa: E402

from services.runtime.metrics import Tally  # noqa: E402

SERIES = (
    {"verb": "create_object", "outcome": "applied"},
    {"verb": "emit_event", "outcome": "applied"},
    {"verb": "patch_status", "outcome": "applied"},
)

Add = Callable[[int, Mapping[str, str]], None]


def cpu_per_add(add: Add, adds: int, rounds: int) -> float:
    """Microseconds of process CPU per call, the best of ``rounds``."""
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for i in range(adds):
            add(1, SERIES[i % len(SERIES)])
        best = min(best, time.process_time() - started)
    return best / adds * 1e6


def exported(name: str) -> dict[str, float]:
    """The exported samples of counter ``name``, by their label text."""
    found: dict[str, float] = {}
    for line in generate_latest(REGISTRY).decode().splitlines():
        if line.startswith(f"{name}{{"):
            labels, _, value = line.rpartition(" ")
            found[labels.removeprefix(name)] = float(value)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adds", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    meter = MeterProvider(metric_readers=[PrometheusMetricReader()]).get_meter("bench")
    counter = meter.create_counter("bench_sdk_total")
    tally = Tally(meter, "bench_tally_total")
    print(f"machine: {platform.platform()}, Python {platform.python_version()}")
    print(f"{'counter':<12} {'CPU µs/add':>11}")
    for name, add in (("SDK Counter", counter.add), ("Tally", tally.add)):
        print(f"{name:<12} {cpu_per_add(add, args.adds, args.rounds):>11.2f}")
    sdk, own = exported("bench_sdk_total"), exported("bench_tally_total")
    if sdk != own or sum(own.values()) != args.adds * args.rounds:
        print(f"the totals differ: SDK {sdk}, Tally {own}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
