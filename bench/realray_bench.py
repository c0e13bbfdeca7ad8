"""Real Ray heads as kubesim runs them (``kubesim.sims.realray``): start-up time and memory per head.

Starts ``--heads`` heads at once (each ``ray start --head --block`` with its own ports and temp dir, as the
kubelet simulator does for a head Pod), ``--rounds`` times, and prints per head the seconds from
``ray start`` to the first passing health checks (dashboard ``/api/gcs_healthz`` and the agent's
``/api/local_raylet_healthz``) and the memory of its whole process tree once idle: PSS (shared pages split
between the processes sharing them, so heads add up) and RSS, from ``/proc/<pid>/smaps_rollup``. Then it
deploys a one-replica Serve application on each head and measures the tree again. Needs
``pip install -e '.[realray]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import aiohttp

from kubesim.sims.processes import descendants
from kubesim.sims.realray import RealRayHead

APPS = Path(__file__).resolve().parent.parent / "tests" / "realray" / "apps"
GREETER = {"applications": [{"name": "greeter", "import_path": "greeter:app", "route_prefix": "/"}]}


def tree_memory_mb(pid: int) -> tuple[float, float]:
    """(PSS, RSS) in MB of a process and its descendants."""
    pss = rss = 0
    for member in {pid, *descendants(pid)}:
        try:
            text = Path(f"/proc/{member}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Pss:"):
                pss += int(line.split()[1])
            elif line.startswith("Rss:"):
                rss += int(line.split()[1])
    return pss / 1024, rss / 1024


async def deploy_serve(head: RealRayHead) -> float:
    """PUT a Serve config and wait until the application is RUNNING; return the PUT's latency."""
    config = {**GREETER, "http_options": {"port": head.ports.serve, "host": "127.0.0.1"}}
    async with aiohttp.ClientSession() as session:
        started = time.monotonic()
        async with session.put(f"{head.url}/api/serve/applications/", json=config) as response:
            response.raise_for_status()
        put_seconds = time.monotonic() - started
        while True:
            async with session.get(f"{head.url}/api/serve/applications/") as response:
                apps = (await response.json())["applications"]
            if apps.get("greeter", {}).get("status") == "RUNNING":
                return put_seconds
            await asyncio.sleep(0.2)


async def one_round(count: int) -> list[dict[str, float]]:
    heads = [RealRayHead(container={}, env={"PYTHONPATH": str(APPS)}, token=None) for _ in range(count)]
    try:
        await asyncio.gather(*(head.start() for head in heads))
        await asyncio.sleep(5)  # let the start-up work (workers, agents) settle before measuring
        figures = []
        for head in heads:
            assert head.pid is not None and head.healthy_after is not None
            pss, rss = tree_memory_mb(head.pid)
            figures.append({"start_s": head.healthy_after, "pss_mb": pss, "rss_mb": rss})
        puts = await asyncio.gather(*(deploy_serve(head) for head in heads))
        for head, put_seconds, figure in zip(heads, puts, figures, strict=True):
            assert head.pid is not None
            pss, rss = tree_memory_mb(head.pid)
            figure.update({"first_put_s": put_seconds, "serve_pss_mb": pss, "serve_rss_mb": rss})
        return figures
    finally:
        await asyncio.gather(*(head.stop() for head in heads))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=1, help="heads started at once")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows: list[dict[str, float]] = []
    for index in range(args.rounds):
        figures = asyncio.run(one_round(args.heads))
        rows.extend(figures)
        for figure in figures:
            print(
                f"round {index + 1}: healthy after {figure['start_s']:.1f} s, idle PSS {figure['pss_mb']:.0f} MB "
                f"(RSS {figure['rss_mb']:.0f} MB); first Serve PUT {figure['first_put_s']:.1f} s, with Serve "
                f"PSS {figure['serve_pss_mb']:.0f} MB (RSS {figure['serve_rss_mb']:.0f} MB)",
                flush=True,
            )
    for key, label in (
        ("start_s", "healthy after (s)"),
        ("pss_mb", "idle PSS (MB)"),
        ("first_put_s", "first Serve PUT (s)"),
        ("serve_pss_mb", "PSS with Serve, 1 replica (MB)"),
    ):
        values = [row[key] for row in rows]
        print(f"{label}: median {statistics.median(values):.1f}, min {min(values):.1f}, max {max(values):.1f}")


if __name__ == "__main__":
    main()
