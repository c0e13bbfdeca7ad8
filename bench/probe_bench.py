"""The prober's targets: CPU of one poll round's target finding (``schema.probes.probe_targets``).

Every ``dashboard_poll_interval`` the prober asks each probe rule for its targets over everything the watch
side holds of the kinds the rules read. The objects here are what the prober holds: RayClusters, their head
Services and their Pods as ``services.edge.watch.podfacts.slim_pod`` keeps them (1 head + ``--workers``
workers per cluster), ``--rayjobs`` Running RayJobs and ``--rayservices`` RayServices, each on a cluster of
its own. Figure: milliseconds per round, the best of ``--repeat`` loops of ``--seconds``.

Run: ``.venv/bin/python bench/probe_bench.py [--clusters 10000] [--workers 3] [--rayjobs 0]
[--rayservices 0]``.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from schema.probes import probe_targets  # noqa: E402
from schema.ray import conventions  # noqa: E402

NAMESPACE_SIZE = 100
"""Clusters per namespace."""


def _meta(name: str, namespace: str, uid: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "1", **extra}


def pod(cluster: str, namespace: str, name: str, node_type: str, n: int) -> dict[str, Any]:
    labels = {conventions.LABEL_CLUSTER: cluster, conventions.LABEL_NODE_TYPE: node_type}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(name, namespace, f"pod-{cluster}-{n}", labels=labels),
        "spec": {"containers": [{"name": "ray", "ports": [{"containerPort": 8000, "name": "serve"}]}]},
        "status": {"podIP": f"10.0.{n % 250}.{n // 250 % 250}"},
    }


def objects(clusters: int, workers: int, rayjobs: int, rayservices: int) -> dict[str, list[dict[str, Any]]]:
    """What the prober holds for the given numbers of each kind."""
    held: dict[str, list[dict[str, Any]]] = {k: [] for k in ("RayCluster", "Service", "Pod", "RayJob", "RayService")}
    ready = [{"type": "HeadPodReady", "status": "True"}]
    for c in range(clusters):
        namespace, name = f"ns-{c // NAMESPACE_SIZE}", f"c-{c}"
        held["RayCluster"].append(
            {"kind": "RayCluster", "metadata": _meta(name, namespace, f"rc-{c}"), "status": {"conditions": ready}}
        )
        held["Service"].append({"kind": "Service", "metadata": _meta(f"{name}-head-svc", namespace, f"svc-{c}")})
        held["Pod"].append(pod(name, namespace, f"{name}-head", conventions.NODE_HEAD, c * (workers + 1)))
        for w in range(workers):
            node = c * (workers + 1) + w + 1
            held["Pod"].append(pod(name, namespace, f"{name}-worker-{w}", conventions.NODE_WORKER, node))
        status: dict[str, Any]
        if c < rayjobs:
            status = {"jobDeploymentStatus": "Running", "jobId": f"j-{c}", "rayClusterName": name}
            rayjob = {"kind": "RayJob", "metadata": _meta(f"rj-{c}", namespace, f"rj-{c}"), "status": status}
            held["RayJob"].append(rayjob)
        elif c < rayjobs + rayservices:
            status = {"activeServiceStatus": {"rayClusterName": name}}
            rayservice = {"kind": "RayService", "metadata": _meta(f"rs-{c}", namespace, f"rs-{c}"), "status": status}
            held["RayService"].append(rayservice)
    return held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--rayjobs", type=int, default=0)
    parser.add_argument("--rayservices", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    held = objects(args.clusters, args.workers, args.rayjobs, args.rayservices)
    print(f"machine: {platform.platform()}, python {platform.python_version()}")
    print(
        f"held: {args.clusters} RayClusters, {len(held['Pod'])} Pods, {args.rayjobs} Running RayJobs, "
        f"{args.rayservices} RayServices"
    )
    best = float("inf")
    targets = 0
    for _ in range(args.repeat):
        rounds, started = 0, time.perf_counter()
        while time.perf_counter() - started < args.seconds:
            targets = len(probe_targets(held))
            rounds += 1
        best = min(best, (time.perf_counter() - started) / rounds)
    print(f"one round's targets: {best * 1000:.1f} ms ({targets} targets)")


if __name__ == "__main__":
    main()
