"""Where a RayCluster burst's time goes on the real API server, read from kube-apiserver's audit log.

Every request the API server answered is in its audit log (``realkube``: level Metadata, one line when a
request is answered, with its receive and answer times). For a burst of RayClusters (``pipeline_bench.py
--api real`` with ``RAYBUS_BENCH_KEEP=1`` keeps the log under ``<workdir>/kube/logs/audit.log``) this
splits each Pod's and each cluster's life into the steps taken by different programs:

- operator: RayCluster created → its head Pod created (the workers are created with it, as KubeRay does);
  last Pod running → the cluster's last status write (``ready``);
- kubelet (the attached simulators): Pod created → bound (the Binding) → first status write (in
  ``instant`` mode a Pod's whole start is one write: Running and Ready);

and prints, per step, the median, p90 and largest seconds, the request rate of each program per 10 s of
the burst, and the API server's own answer time (receive → answer) per kind of request.

Run: ``.venv/bin/python bench/audit_timeline.py AUDIT_LOG``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

BUCKET = 10.0
"""Seconds per row of the request-rate table."""


@dataclass
class Request:
    """One answered request."""

    at: float
    """When it was answered (seconds since the epoch)."""
    took: float
    """Seconds from receipt to answer."""
    verb: str
    resource: str
    """``resource`` or ``resource/subresource``."""
    namespace: str
    name: str
    code: int
    agent: str


@dataclass
class Timeline:
    """The firsts and lasts of a burst, by object."""

    cluster_created: dict[str, float] = field(default_factory=dict)
    cluster_last_status: dict[str, float] = field(default_factory=dict)
    pod_created: dict[str, float] = field(default_factory=dict)
    pod_bound: dict[str, float] = field(default_factory=dict)
    pod_running: dict[str, float] = field(default_factory=dict)


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def requests(log: Path) -> Iterator[Request]:
    """The answered requests of an audit log (ResponseComplete lines), in log order."""
    with log.open() as lines:
        for line in lines:
            event: dict[str, Any] = json.loads(line)
            if event.get("stage") != "ResponseComplete":
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "")
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            yield Request(
                at=_seconds(event["stageTimestamp"]),
                took=_seconds(event["stageTimestamp"]) - _seconds(event["requestReceivedTimestamp"]),
                verb=event["verb"],
                resource=resource,
                namespace=ref.get("namespace", ""),
                name=ref.get("name", ""),
                code=int((event.get("responseStatus") or {}).get("code", 0)),
                agent=program(event),
            )


SIMULATOR_WRITES = frozenset({"bindings", "pods/binding", "pods/status", "nodes", "nodes/status", "leases"})
"""What only the attached simulators write (their kubelet); raybus and the bench send the same user agent."""


def program(event: dict[str, Any]) -> str:
    """Which program sent a request: a Kubernetes program by its user agent; of the official client's
    (raybus, the simulators, the bench), the simulators by what they write (a kubelet's requests, Pod
    updates: the heads' recorded URLs) and their watches (urllib3), the bench by its RayCluster creates
    and lists; the rest is raybus."""
    agent = str(event.get("userAgent", ""))
    ref = event.get("objectRef") or {}
    resource = ref.get("resource", "") + ("/" + ref["subresource"] if ref.get("subresource") else "")
    if agent.startswith("kube-controller-manager"):
        return "kube-controller-manager"
    if agent.startswith("kube-apiserver"):
        return "kube-apiserver"
    if resource == "rayclusters" and event["verb"] in ("create", "list"):
        return "bench"
    if agent.startswith("python-urllib3") or resource in SIMULATOR_WRITES:
        return "simulators"
    if resource == "pods" and event["verb"] == "update":
        return "simulators"
    if agent.startswith("OpenAPI-Generator"):
        return "raybus"
    return "other"


def timeline(found: list[Request]) -> Timeline:
    """The first create, binding and status write of each Pod and the create and last status write of each
    RayCluster; a Pod belongs to the cluster its name starts with."""
    t = Timeline()
    for r in found:
        if r.code >= 300:
            continue
        key = f"{r.namespace}/{r.name}"
        if r.resource == "rayclusters" and r.verb == "create":
            t.cluster_created.setdefault(key, r.at)
        elif r.resource == "rayclusters/status":
            t.cluster_last_status[key] = r.at
        elif r.resource == "pods" and r.verb == "create" and r.agent == "raybus":
            t.pod_created.setdefault(key, r.at)
        elif r.resource in ("bindings", "pods/binding"):
            t.pod_bound.setdefault(key, r.at)
        elif r.resource == "pods/status":
            t.pod_running.setdefault(key, r.at)
    return t


def cluster_of(pod: str, clusters: set[str]) -> str | None:
    """The cluster a Pod name (``ns/<cluster>-head-xxxxx``, ``ns/<cluster>-<group>-worker-xxxxx``) is of."""
    namespace, _, name = pod.partition("/")
    for marker in ("-head-", "-worker-"):
        if marker in name:
            prefix = name.split(marker)[0]
            while prefix:
                if f"{namespace}/{prefix}" in clusters:
                    return f"{namespace}/{prefix}"
                prefix = prefix.rpartition("-")[0]
    return None


def steps(t: Timeline) -> dict[str, list[float]]:
    """Seconds of each step, one value per Pod or cluster that went through it."""
    clusters = set(t.cluster_created)
    heads: dict[str, str] = {}
    workers: defaultdict[str, list[str]] = defaultdict(list)
    for pod in t.pod_created:
        cluster = cluster_of(pod, clusters)
        if cluster is None:
            continue
        if "-head-" in pod:
            heads[cluster] = pod
        else:
            workers[cluster].append(pod)
    out: defaultdict[str, list[float]] = defaultdict(list)
    for cluster, created in t.cluster_created.items():
        head = heads.get(cluster)
        if head is None:
            continue
        out["operator: cluster created → head Pod created"].append(t.pod_created[head] - created)
        pods = [head, *workers.get(cluster, [])]
        for pod in pods:
            if pod in t.pod_bound:
                out["kubelet: Pod created → bound"].append(t.pod_bound[pod] - t.pod_created[pod])
                if pod in t.pod_running:
                    out["kubelet: Pod bound → running (status write)"].append(t.pod_running[pod] - t.pod_bound[pod])
        running = [t.pod_running[p] for p in pods if p in t.pod_running]
        if len(running) == len(pods) and cluster in t.cluster_last_status:
            out["operator: last Pod running → last cluster status write"].append(
                t.cluster_last_status[cluster] - max(running)
            )
            out["whole: cluster created → last cluster status write"].append(t.cluster_last_status[cluster] - created)
    return dict(out)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def print_report(found: list[Request]) -> None:
    """Steps, request rates per program and the API server's answer times."""
    t = timeline(found)
    if not t.cluster_created:
        print("no RayCluster was created in this log")
        return
    start = min(t.cluster_created.values())
    end = max(t.cluster_last_status.values(), default=start)
    print(f"{len(t.cluster_created)} RayClusters, first create → last cluster status write: {end - start:.1f} s")
    print(f"Pods created by raybus {len(t.pod_created)}, bound {len(t.pod_bound)}, running {len(t.pod_running)}")
    print("\nstep (seconds): median / p90 / max (count)")
    for name, values in steps(t).items():
        print(
            f"  {name:<58} {statistics.median(values):7.2f} / {quantile(values, 0.9):7.2f} / {max(values):7.2f}"
            f"  ({len(values)})"
        )
    burst = [r for r in found if start <= r.at <= end]
    agents = sorted({r.agent for r in burst})
    print(f"\nrequests answered per {BUCKET:.0f} s of the burst, by program (watches excluded)")
    print("  from s  " + " ".join(f"{a:>23}" for a in agents) + "   pods created / bound / running")
    rows: defaultdict[int, Counter[str]] = defaultdict(Counter)
    for r in burst:
        if r.verb != "watch":
            rows[int((r.at - start) // BUCKET)][r.agent] += 1
    marks: defaultdict[int, Counter[str]] = defaultdict(Counter)
    for kind, times in (("created", t.pod_created), ("bound", t.pod_bound), ("running", t.pod_running)):
        for at in times.values():
            if start <= at <= end:
                marks[int((at - start) // BUCKET)][kind] += 1
    for row in range(int((end - start) // BUCKET) + 1):
        counts = " ".join(f"{rows[row][a]:>23}" for a in agents)
        pods = marks[row]
        print(f"  {row * BUCKET:6.0f}  {counts}   {pods['created']:>4} / {pods['bound']:>4} / {pods['running']:>4}")
    print("\nthe API server's answer time (receive → answer, ms) during the burst: median / p99 (count)")
    kinds: defaultdict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in burst:
        if r.verb not in ("watch", "get", "list"):
            kinds[(r.agent, r.verb, r.resource)].append(1000 * r.took)
    for (agent, verb, resource), took in sorted(kinds.items(), key=lambda kv: -len(kv[1]))[:12]:
        print(
            f"  {agent:<12} {verb:<7} {resource:<26} {statistics.median(took):7.1f} / {quantile(took, 0.99):7.1f}"
            f"  ({len(took)})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("audit_log", type=Path)
    args = parser.parse_args()
    print_report(list(requests(args.audit_log)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
