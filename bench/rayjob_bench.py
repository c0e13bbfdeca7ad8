"""RayJob benchmark: N RayJobs created at once, run to Complete on the simulator, history in PostgreSQL.

The stack is ``pipeline_bench``'s (every component its own process: nats-server, kubesim with kubelet
``instant``, the watcher's watch, apply and probe roles with ``--use-kubernetes-proxy``, ``raybus
status``, 1 or 2 ``raybus reconciler``), with the status service on a fresh PostgreSQL database. Each
RayJob is ``tests/e2e/rayjobs.small_rayjob``: K8sJobMode (a submitter Job; ``--mode HTTPMode``: the
applier submits to the dashboard instead), a head-only cluster, a Ray job of kubesim's default 0.2 s.
Figures: time until every RayJob has ended (Complete, or Failed with its reason); how late the prober's
first dashboard answer came after a RayJob went Running; reconciles (every decision is a CommandBatch on
RAYBUS_COMMANDS) and commands; transitions persisted into PostgreSQL (rows of the ``transitions`` table,
sampled every second: the mean rate from the first to the last row, the best one-second rate, and how long
the history lagged behind the last Complete); CPU seconds and peak RSS per process.

Run: ``.venv/bin/python bench/rayjob_bench.py [--jobs 1000] [--workers 1] [--mode K8sJobMode] [--qps 100]``
with PostgreSQL at ``RAYBUS_PG_HOST``/``RAYBUS_PG_PORT``/``RAYBUS_PG_USER`` (default 127.0.0.1:5432, user
postgres, trust).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import asyncpg
import nats
from follow import Follow
from kubernetes import client, config
from pipeline_bench import Layout, print_flow, process_figures, progress, stack, stack_dir, stream_figures

from schema import subjects
from schema.codec import decode_input
from schema.messages import Observation, WatchEvent
from schema.ray.rayjob import HTTP_MODE, K8S_JOB_MODE
from tests.e2e.rayjobs import small_rayjob
from tests.fixtures.postgres import PG_HOST, PG_PORT, PG_USER, execute_admin
from tests.helpers import stored_messages


@contextlib.contextmanager
def fresh_database() -> Iterator[tuple[str, str]]:
    """A new empty PostgreSQL database: (SQLAlchemy URL for raybus, its name); dropped afterwards."""
    name = f"raybus_bench_{uuid.uuid4().hex[:12]}"
    asyncio.run(execute_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql+asyncpg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}", name
    finally:
        asyncio.run(execute_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


class TransitionSampler:
    """Counts the rows of ``transitions`` every second, in a thread of its own, while the run goes on."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        conn = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database=self.database, timeout=5)
        try:
            while not self._stop.is_set():
                with contextlib.suppress(asyncpg.UndefinedTableError):  # before the migrations ran
                    count = await conn.fetchval("SELECT count(*) FROM transitions")
                    self.samples.append((time.perf_counter(), int(count)))
                await asyncio.sleep(1.0)
        finally:
            await conn.close()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def figures(self, complete_at: float) -> dict[str, float]:
        """Rows, mean rate from the first to the last row, best 1-s rate, lag after ``complete_at``."""
        rows = self.samples[-1][1] if self.samples else 0
        moving = [(t, n) for t, n in self.samples if n > 0]
        first = next((t for t, n in moving), 0.0)
        last = next((t for t, n in self.samples if n == rows), 0.0)
        steps = [
            (n2 - n1) / (t2 - t1) for (t1, n1), (t2, n2) in zip(self.samples, self.samples[1:], strict=False) if t2 > t1
        ]
        return {
            "transitions": rows,
            "persisted_per_s": rows / (last - first) if last > first else 0.0,
            "peak_persisted_per_s": max(steps, default=0.0),
            "history_lag_s": max(0.0, last - complete_at),
        }


def end_state(rayjob: dict[str, Any]) -> str:
    """How a RayJob ended: ``Complete``, ``Failed/<reason>``, or "" while it has not."""
    status = rayjob.get("status") or {}
    state = status.get("jobDeploymentStatus")
    if state == "Complete":
        return "Complete"
    return f"Failed/{status.get('reason', '')}" if state == "Failed" else ""


async def prober_latency(nats_url: str) -> list[float]:
    """Per RayJob, seconds from its first status write saying Running to its first dashboard observation."""
    nc = await nats.connect(nats_url)
    try:
        messages = await stored_messages(nc.jetstream(), subjects.EVENTS_STREAM, f"{subjects.PREFIX}.part.*.RayJob.>")
        running: dict[str, float] = {}
        observed: dict[str, float] = {}
        for msg in messages:
            event = decode_input(msg.data)
            stamp = msg.metadata.timestamp.timestamp()
            if isinstance(event, Observation):
                observed.setdefault(event.key.name, stamp)
            elif (
                isinstance(event, WatchEvent)
                and event.entry_kind == "RayJob"
                and (event.object.get("status") or {}).get("jobDeploymentStatus") == "Running"
            ):
                running.setdefault(event.key.name, stamp)
        return sorted(observed[name] - at for name, at in running.items() if name in observed)
    finally:
        await nc.close()


async def history_drained(nats_url: str) -> bool:
    """The status service has persisted every result published so far."""
    nc = await nats.connect(nats_url)
    try:
        info = await nc.jetstream().consumer_info(subjects.RESULTS_STREAM, subjects.STATUS_CONSUMER)
        return bool(info.num_pending == 0 and info.num_ack_pending == 0)
    finally:
        await nc.close()


def run(
    jobs: int,
    reconcilers: int,
    threads: int,
    timeout: float,
    *,
    mode: str = K8S_JOB_MODE,
    qps: float | None = None,
    layout: Layout | None = None,
) -> dict[str, Any]:
    """``jobs`` RayJobs of submission ``mode`` to their end; ``qps`` is the applier's API budget (None: its
    default)."""
    watcher_args = ["--use-kubernetes-proxy", *(["--qps", str(qps)] if qps is not None else [])]
    with (
        fresh_database() as (db_url, database),
        stack_dir("rayjob-bench-") as tmp,
        stack(tmp, reconcilers, db_url=db_url, watcher_args=watcher_args, layout=layout) as (s, nats_url, kube),
    ):
        api = config.new_client_from_config(str(kube))  # type: ignore[no-untyped-call]
        api.configuration.connection_pool_maxsize = threads + 2
        api = client.ApiClient(api.configuration)
        custom = client.CustomObjectsApi(api)
        sampler = TransitionSampler(database)
        sampler.start()
        before = {p.name: p.usage()[0] for p in s.procs}

        def create(i: int) -> None:
            body = small_rayjob(f"bench-{i:04d}", submissionMode=mode)
            custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", body)

        with Follow(api, "rayjobs", end_state) as follow:
            started = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(create, range(jobs)))
            created_in = time.perf_counter() - started
            ends: Counter[str] = Counter()
            while time.perf_counter() - started < timeout:
                ends = follow.counts()
                del ends[""]
                progress(f"{dict(ends)} of {jobs}", started)
                if sum(ends.values()) == jobs:
                    break
                time.sleep(0.5)
            complete_at = time.perf_counter()
        while time.perf_counter() - complete_at < 120 and not asyncio.run(history_drained(nats_url)):
            time.sleep(0.5)
        time.sleep(2)  # one more sample of the table after the last commit
        sampler.stop()
        usage = {p.name: p.usage() for p in s.procs}
        progress(" ".join(f"{name} {cpu:.1f}s/{rss:.0f}MB" for name, (cpu, rss) in usage.items()), started)
        api.close()
        figures = asyncio.run(stream_figures(nats_url))
        latency = asyncio.run(prober_latency(nats_url))
        wall = complete_at - started
        return {
            "jobs": jobs,
            "mode": mode,
            "reconcilers": reconcilers,
            "created_in_s": created_in,
            "ends": dict(ends),
            "first_observation_p50_s": latency[len(latency) // 2] if latency else 0.0,
            "first_observation_p90_s": latency[int(0.9 * (len(latency) - 1))] if latency else 0.0,
            "all_complete_in_s": wall,
            "reconciles_per_s": figures["decisions"] / wall,
            **figures,
            **sampler.figures(complete_at),
            "processes": process_figures(s, before, usage),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1])
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--mode", choices=(K8S_JOB_MODE, HTTP_MODE), default=K8S_JOB_MODE, help="submissionMode")
    parser.add_argument("--qps", type=float, help="the applier's API budget (default: its own, 100; 0: unlimited)")
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0))
    print(f"machine: {platform.platform()}, {cpus} cpus, python {platform.python_version()}")
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for workers in args.workers:
        r = run(args.jobs, workers, args.threads, args.timeout, mode=args.mode, qps=args.qps)
        print(
            f"\n{workers} reconciler(s): {sum(r['ends'].values())}/{r['jobs']} RayJobs ended in "
            f"{r['all_complete_in_s']:.1f} s (created in {r['created_in_s']:.1f} s): {r['ends']}"
        )
        print(
            f"  prober: first dashboard observation after Running p50 {r['first_observation_p50_s']:.1f} s, "
            f"p90 {r['first_observation_p90_s']:.1f} s"
        )
        print(
            f"  reconciles {r['decisions']} ({r['reconciles_per_s']:.0f}/s, "
            f"{r['decisions'] / r['jobs']:.1f} per RayJob), "
            f"with commands {r['decisions_with_commands']}, commands {r['commands']} "
            f"({r['commands'] / r['jobs']:.1f} per RayJob), results {r['results']}, events {r['events']}"
        )
        print(f"  reconciles by kind {r['decisions_by_kind']}")
        print(
            f"  transitions persisted into PostgreSQL: {r['transitions']} ({r['transitions'] / r['jobs']:.1f} per "
            f"RayJob), {r['persisted_per_s']:.0f}/s on average, best second {r['peak_persisted_per_s']:.0f}/s; "
            f"history complete {r['history_lag_s']:.1f} s after the last RayJob"
        )
        print(f"  load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print_flow(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
