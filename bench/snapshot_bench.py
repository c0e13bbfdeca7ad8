"""Snapshot read benchmark: what one reconcile key's snapshot costs to read from KV ``raybus-objects``.

A converged RayCluster of 1 head + ``--workers`` workers (the pure reconcile's own objects,
``reconcile_bench.converge``) is written to the bucket of a fresh nats-server; then one
``SnapshotReader`` reads the key ``--reads`` times, one read after another (a partition's decisions
of one key) and ``--concurrency`` at a time (a partition's keys side by side), twice: read whole every
time (the reader told to forget the key before each read: a key read for the first time, or after a busy
stretch), and held (the key's decoded entries kept, only its changes read: a quiet bucket).
Figures: reads/s, and the CPU microseconds per read of this process and of nats-server.

Run: ``.venv/bin/python bench/snapshot_bench.py [--workers 4] [--reads 5000] [--concurrency 16]``.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import nats
from kubesim_bench import _accepts, _free_port, cpu_seconds
from pipeline_bench import stack_dir, wait_for
from reconcile_bench import KEY, converge

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from schema import subjects  # noqa: E402
from schema.config import OperatorConfig  # noqa: E402
from services.runtime.natsbin import nats_server_binary  # noqa: E402
from services.runtime.settings import BusSettings, PartitionSettings  # noqa: E402
from services.runtime.snapshots import SnapshotReader  # noqa: E402
from services.runtime.topology import ensure_topology  # noqa: E402


async def measure(url: str, server_pid: int, workers: int, reads: int, concurrency: int) -> None:
    nc = await nats.connect(url)
    try:
        buckets = await ensure_topology(nc, bus=BusSettings(), partitions=PartitionSettings())
        objects = converge(workers, OperatorConfig())
        revision = 0
        for kind, by_name in objects.items():
            for name, body in by_name.items():
                revision = await buckets.objects.put(subjects.entry_key(KEY, kind, name), msgspec.json.encode(body))
        entries = sum(len(by_name) for by_name in objects.values())
        reader = SnapshotReader(nc)
        await reader.read(KEY, min_revision=revision)  # the connection's first read sets up what reads share
        print(f"key: {entries} entries, {revision} writes")

        async def loop(count: int, whole: bool) -> None:
            for _ in range(count):
                if whole:
                    reader.forget(lambda _: True)
                await reader.read(KEY, min_revision=revision)

        modes = [(whole, parallel) for whole in (True, False) for parallel in (1, concurrency)]
        for whole, parallel in modes:
            pace = "one after another" if parallel == 1 else f"{parallel} at a time"
            label = f"{'whole' if whole else 'held'}, {pace}"
            own, server, started = time.process_time(), cpu_seconds(server_pid), time.perf_counter()
            await asyncio.gather(*(loop(reads // parallel, whole) for _ in range(parallel)))
            elapsed = time.perf_counter() - started
            done = reads // parallel * parallel
            own_us = (time.process_time() - own) / done * 1e6
            server_us = (cpu_seconds(server_pid) - server) / done * 1e6
            print(
                f"  {label:<24} {done / elapsed:8.0f} reads/s   CPU per read: this process {own_us:6.0f} µs, "
                f"nats-server {server_us:6.0f} µs   (whole reads {reader.whole_reads})"
            )
    finally:
        await nc.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4, help="worker Pods of the key (one head besides)")
    parser.add_argument("--reads", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    print(f"machine: {platform.platform()} ({platform.machine()}), python {platform.python_version()}")
    with stack_dir("snapshot-bench-") as tmp:
        port = _free_port()
        argv = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(tmp / "js")]
        server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: _accepts(port), "nats-server")
            asyncio.run(measure(f"nats://127.0.0.1:{port}", server.pid, args.workers, args.reads, args.concurrency))
        finally:
            server.terminate()
            server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
