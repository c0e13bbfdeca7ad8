"""Scale benchmark: one RayCluster scaled to many workers, many clusters or RayJobs at once, and scale-out.

(a) ``--workers N``: one RayCluster is created with 1 worker, then patched to N workers; figures: seconds
until all N workers are counted ready in the status and (then checked) Running, the commands and API calls it took,
the decisions published in parts and the largest message on RAYBUS_COMMANDS, CPU seconds and peak RSS
per process, and beside it the floor: the same number of API calls at kubesim's raw create rate.
(b) ``--clusters N``: N RayClusters (1 head + 3 workers) created at once (``pipeline_bench``'s run):
time until all are ready, duplicate creates (create results with outcome ``already_done``), and the
watch process's peak RSS per 1,000 Pods.
(c) ``--rayjobs N``: N RayJobs with ``submissionMode: HTTPMode`` created at once, run to their end
(``rayjob_bench``'s run, the status service on a fresh PostgreSQL database).
(d) ``--scale-out N``: N RayClusters to ready with 1, 2 and 4 (``--replicas``) replicas of every scalable
stage (reconciler, applier, prober), each replica process in a cgroup v1 ``cpu`` group of its own limited
to ``--cpu-share`` of a core (0.1 by default, ``bench/cpuquota.py``); the replicas' worker ids are chosen
so the 16 partitions split evenly, and the burst starts once every partition is leased. Figures:
clusters ready per second for each replica count and the ratios to one replica. The other processes
(watch, nats-server, kubesim, status) run unlimited: their CPU seconds show when one of them is the
ceiling.

Every component runs as its own process (``pipeline_bench.stack``), the watcher as its three roles
(``watch``, ``applier-i``, ``prober-i``) unless ``--combined-watcher``. CPU seconds and call counts are
the figures to compare across runs on a shared machine; wall-clock times move with the machine's load.
``--qps`` (default 0: unlimited) is the appliers' API budget in every mode.

After (a)'s figures are taken, the cluster is patched down to 0 workers: seconds until no worker Pod is
left, and the outcomes of the commands that took.

``--api real`` runs (a) and (b) against the real API server (``pipeline_bench --api real``); the floor is
then its raw Pod-create rate.

Run: ``.venv/bin/python bench/scale_bench.py [--workers 2000] [--clusters 0] [--rayjobs 0] [--scale-out 0]``,
e.g. ``--workers 0 --clusters 10000`` or ``--workers 0 --scale-out 1000``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

import msgspec
import nats
import rayjob_bench
from kubernetes import client, config
from pipeline_bench import (
    API_SERVERS,
    Layout,
    pod_create_ceiling,
    print_flow,
    run_pipeline,
    stack,
    stack_dir,
    stream_figures,
)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from schema import subjects  # noqa: E402
from schema.codec import decode_batch  # noqa: E402
from schema.ray.rayjob import HTTP_MODE  # noqa: E402
from tests.e2e.clusters import small_cluster  # noqa: E402
from tests.helpers import stored_messages  # noqa: E402


async def message_sizes(nats_url: str) -> dict[str, int]:
    """The largest command batch message and how many decisions were split."""
    nc = await nats.connect(nats_url)
    try:
        stored = await stored_messages(nc.jetstream(), subjects.COMMANDS_STREAM, timeout=10)
        batches = [decode_batch(m.data) for m in stored]
        return {
            "largest_message_bytes": max((len(m.data) for m in stored), default=0),
            "max_payload": nc.max_payload,
            "decisions_in_parts": len({b.id for b in batches if b.parts > 1}),
            "parts": sum(1 for b in batches if b.parts > 1),
        }
    finally:
        await nc.close()


def worker_phases(core: client.CoreV1Api, name: str) -> list[str]:
    """The phase of each worker Pod of cluster ``name`` that exists."""
    response = core.list_namespaced_pod(
        "default", label_selector=f"ray.io/cluster={name},ray.io/node-type=worker", _preload_content=False
    )
    pods = msgspec.json.decode(response.read())["items"]  # type: ignore[attr-defined]  # raw response
    return [str((p.get("status") or {}).get("phase", "")) for p in pods]


def ready_workers(custom: client.CustomObjectsApi, name: str) -> int:
    cluster = cast(dict[str, Any], custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayclusters", name))
    return int((cluster.get("status") or {}).get("readyWorkerReplicas") or 0)


def scale_to_zero(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, group: dict[str, Any], timeout: float
) -> tuple[float, int]:
    """Patch cluster ``scale`` down to 0 workers; seconds until none is left (0.0 if some are at the
    timeout), and how many are left."""
    started = time.perf_counter()
    patch = {"spec": {"workerGroupSpecs": [{**group, "replicas": 0}]}}
    custom.patch_namespaced_custom_object("ray.io", "v1", "default", "rayclusters", "scale", patch)
    while time.perf_counter() - started < timeout:
        # Listing thousands of Pods is costly: the status says first when none is counted ready any more.
        if ready_workers(custom, "scale") == 0 and not worker_phases(core, "scale"):
            return time.perf_counter() - started, 0
        time.sleep(0.5)
    return 0.0, len(worker_phases(core, "scale"))


def run_scale(workers: int, timeout: float, qps: float, layout: Layout, api_server: str = "kubesim") -> dict[str, Any]:
    """(a): one cluster, 1 → ``workers`` workers, then → 0 (its figures measured apart), on ``api_server``."""
    with (
        stack_dir("scale-bench-") as tmp,
        stack(tmp, 1, watcher_args=["--qps", str(qps)], layout=layout, api_server=api_server) as (
            s,
            nats_url,
            kubeconfig,
        ),
    ):
        api = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
        api = client.ApiClient(api.configuration)
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        body = small_cluster("scale", workers=1)
        group = {**body["spec"]["workerGroupSpecs"][0], "maxReplicas": workers}
        body["spec"]["workerGroupSpecs"] = [group]
        custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayclusters", body)
        deadline = time.monotonic() + 120
        while ready_workers(custom, "scale") < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        before = {p.name: p.usage()[0] for p in s.procs}
        started = time.perf_counter()
        patch = {"spec": {"workerGroupSpecs": [{**group, "replicas": workers}]}}
        custom.patch_namespaced_custom_object("ray.io", "v1", "default", "rayclusters", "scale", patch)
        running_in = ready_in = 0.0
        # The status is polled, one small GET; the Pods are listed only once it counts them all (listing
        # 5,000 Pods twice a second cost the API server a tenth of its CPU, and this process as much).
        while time.perf_counter() - started < timeout:
            if ready_workers(custom, "scale") >= workers:
                ready_in = time.perf_counter() - started
                if worker_phases(core, "scale").count("Running") >= workers:
                    running_in = time.perf_counter() - started
                    break
            time.sleep(0.2)
        usage = {p.name: p.usage() for p in s.procs}
        figures = asyncio.run(stream_figures(nats_url))
        sizes = asyncio.run(message_sizes(nats_url))
        down_in, left = scale_to_zero(custom, core, group, timeout)
        down = asyncio.run(stream_figures(nats_url))["outcomes"]
        api.close()
        return {
            "workers": workers,
            "running_in_s": running_in,
            "ready_in_s": ready_in,
            "down_in_s": down_in,
            "workers_left": left,
            "down_outcomes": dict(Counter(down) - Counter(figures["outcomes"])),
            **figures,
            **sizes,
            "processes": {
                name: {"cpu_s": usage[name][0] - before[name], "peak_rss_mb": usage[name][1]} for name in usage
            },
        }


def watch_process(processes: dict[str, dict[str, float]]) -> str:
    """The process that holds the informers and the projection: ``watch``, or the combined ``watcher``."""
    return "watch" if "watch" in processes else "watcher"


def run_scale_out(
    clusters: int, replicas: int, share: float, threads: int, timeout: float, qps: float
) -> dict[str, Any]:
    """(d): ``replicas`` of every scalable stage, each limited to ``share`` of a core."""
    layout = Layout(appliers=replicas, probers=replicas, cpu_share=share)
    return run_pipeline(clusters, replicas, threads, timeout, qps, layout=layout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2000, help="(a) workers of the one scaled cluster (0: skip)")
    parser.add_argument("--clusters", type=int, default=0, help="(b) clusters created at once (0: skip)")
    parser.add_argument("--qps", type=float, default=0.0, help="the watcher's API budget (0: unlimited)")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rayjobs", type=int, default=0, help="(c) HTTPMode RayJobs run to their end (0: skip)")
    parser.add_argument(
        "--scale-out", type=int, default=0, metavar="CLUSTERS", help="(d) clusters per replica count (0: skip)"
    )
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4], help="(d) replicas of each stage")
    parser.add_argument("--cpu-share", type=float, default=0.1, help="(d) CPU limit of each replica, in cores")
    parser.add_argument(
        "--combined-watcher", action="store_true", help="(a)-(c): one raybus watcher process with all three roles"
    )
    parser.add_argument(
        "--api", choices=API_SERVERS, default="kubesim", help="(a), (b): the API server (pipeline_bench --api)"
    )
    args = parser.parse_args()
    if args.api != "kubesim" and (args.rayjobs or args.scale_out):
        parser.error("--rayjobs and --scale-out run against kubesim only")
    layout = Layout(combined_watcher=args.combined_watcher)
    print(f"machine: {platform.platform()} ({platform.machine()}), python {platform.python_version()}")
    print(f"API server: {args.api}; load average: {os.getloadavg()[0]:.1f}")
    if args.workers:
        r = run_scale(args.workers, args.timeout, args.qps, layout, args.api)
        calls = r["results"]
        ceiling = pod_create_ceiling(min(calls, 4000), args.threads, args.api)
        floor = calls / ceiling
        print(f"(a) 1 → {r['workers']} workers at --qps {args.qps:g}")
        print(f"  counted ready in {r['ready_in_s']:.1f} s, every worker Pod Running at {r['running_in_s']:.1f} s")
        print(
            f"  then → 0: every worker Pod gone in {r['down_in_s']:.1f} s ({r['workers_left']} left); "
            f"outcomes {r['down_outcomes']}"
        )
        print(f"  {r['decisions']} decisions, {r['commands']} commands, {calls} API calls; outcomes {r['outcomes']}")
        print(
            f"  {r['decisions_in_parts']} decision(s) in {r['parts']} parts; largest message "
            f"{r['largest_message_bytes']} B (max_payload {r['max_payload']} B)"
        )
        print(f"  floor: {calls} calls at {args.api}'s {ceiling:.0f} creates/s = {floor:.1f} s")
        print_flow(r)
    if args.clusters:
        r = run_pipeline(args.clusters, 1, args.threads, args.timeout, args.qps, layout=layout, api_server=args.api)
        duplicates = r["outcomes"].get("create_object/already_done", 0)
        watch = watch_process(r["processes"])
        per_thousand = r["processes"][watch]["peak_rss_mb"] / (r["pods"] / 1000)
        print(f"(b) {r['clusters']} clusters (1 head + 3 workers) at once, 1 reconciler")
        print(f"  {r['ready']} ready in {r['all_ready_in_s']:.1f} s (created in {r['created_in_s']:.1f} s)")
        print(f"  duplicate creates (already_done) {duplicates}; {watch} peak RSS {per_thousand:.1f} MB per 1,000 Pods")
        print(f"  {r['decisions']} decisions, {r['commands']} commands")
        print_flow(r)
    if args.rayjobs:
        j = rayjob_bench.run(args.rayjobs, 1, args.threads, args.timeout, mode=HTTP_MODE, qps=args.qps, layout=layout)
        print(f"(c) {j['jobs']} RayJobs ({HTTP_MODE}) at once, 1 reconciler, --qps {args.qps:g}")
        print(
            f"  {sum(j['ends'].values())} ended in {j['all_complete_in_s']:.1f} s "
            f"(created in {j['created_in_s']:.1f} s): {j['ends']}"
        )
        print(
            f"  {j['decisions']} decisions, {j['commands']} commands; transitions persisted {j['transitions']}; "
            f"prober's first answer after Running p50 {j['first_observation_p50_s']:.1f} s, "
            f"p90 {j['first_observation_p90_s']:.1f} s"
        )
        print_flow(j)
    if args.scale_out:
        rates: dict[int, float] = {}
        for replicas in args.replicas:
            r = run_scale_out(args.scale_out, replicas, args.cpu_share, args.threads, args.timeout, args.qps)
            rates[replicas] = r["ready"] / r["all_ready_in_s"]
            print(
                f"(d) {replicas} replica(s) of reconciler, applier and prober, each at {args.cpu_share:g} of a core: "
                f"{r['ready']}/{r['clusters']} ready in {r['all_ready_in_s']:.1f} s = {rates[replicas]:.2f} clusters/s"
            )
            print(f"  {r['decisions']} decisions, {r['commands']} commands")
            print_flow(r)
        base = rates.get(1)
        if base and len(rates) > 1:
            print("  ratios: " + ", ".join(f"{n}/1 = {rate / base:.2f}x" for n, rate in rates.items() if n != 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
