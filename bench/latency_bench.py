"""Latency benchmark: one idle RayCluster scaled up by one worker, N times, through the whole stack.

The stack is ``pipeline_bench``'s (every component its own process, kubesim with kubelet ``instant``, one
reconciler, the applier without an API budget). Per change the bench writes ``replicas + 1`` with a JSON
patch and waits for the new worker Pod's ADDED on its own watch, then for the stack to be idle again.

It runs twice. First as ``raybus up`` runs, no span recorded: write → Pod seen (p50/p90/p99), the aim's
figure. Then with every raybus service under ``bench/traced.py``, which writes each span, with its events'
times, to JSON lines: write → Pod seen again (what recording costs), write → create applied (the applier
span's end), and the time in each step of the change's trace (matched by the resourceVersion the patch
returned), medians and, for the change whose Pod took longest to show, its own:

- watch: the write until the projection span starts (kubesim, the watch stream, informer decoding);
- kv write: the ``watcher.project`` span until its entry is stored (``tracing.ENTRY_WRITTEN``);
- event publish: from there until the span ends (the WatchEvent stored);
- event fetch: until the ``reconcile`` span starts (the partition's fetch);
- snapshot: until the key's snapshot is had (``tracing.SNAPSHOT_READ``);
- decide: until the decision is drafted and split into kept and withheld commands (``tracing.DECIDED``);
- decision publish: until its batch is stored (``tracing.DECISION_STORED``);
- command fetch: until the ``applier.check_batch`` span of that batch starts (the applier's fetch);
- checks: until the ``applier.create_object`` span of the Pod starts (freshness and content checks);
- apply: that span (the API call).

Five of the steps are the bus's: three publishes, each acknowledged, and two fetches. On an idle stack each
wakes a process that slept (``bench/roundtrip_bench.py`` measures a round trip idle and busy).

Run: ``.venv/bin/python bench/latency_bench.py [--changes 50] [--settle 0.5] [--peer PYTHON [--pairs N]]``;
with ``--peer`` the same changes go to the Kopf peer operator of ``bench/peer`` (no spans: only the
end-to-end figure). With ``--pairs N`` too, the peer and raybus (no span recorded) in turn, N times, each
pair after 20 idle JetStream publishes (``roundtrip_bench.py``) that say what kind of host it ran on: the
comparison turns with the price of a wake (docs/latency.md), so it is made pair by pair, in one run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
from kubernetes import client, config
from pipeline_bench import peer_stack, stack, stack_dir
from roundtrip_bench import publish_round_trips
from timing import percentile, watch_events

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from services.runtime.tracing import DECIDED, DECISION_STORED, ENTRY_WRITTEN, SNAPSHOT_READ  # noqa: E402
from tests.e2e.clusters import small_cluster  # noqa: E402

NAME = "latency"
HOPS = (
    "watch",
    "kv write",
    "event publish",
    "event fetch",
    "snapshot",
    "decide",
    "decision publish",
    "command fetch",
    "checks",
    "apply",
)


class PodWatch:
    """The first time each Pod of the cluster is seen (ADDED) on a raw watch stream (a daemon thread; the
    stream ends with kubesim)."""

    def __init__(self, core: client.CoreV1Api, selector: str) -> None:
        self._core = core
        self._selector = selector
        self.seen: dict[str, int] = {}
        self._changed = threading.Condition()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        response: Any = self._core.list_namespaced_pod(
            "default", label_selector=self._selector, watch=True, _preload_content=False
        )
        for arrived, event in watch_events(response):
            if event.get("type") == "ADDED":
                with self._changed:
                    self.seen.setdefault(event["object"]["metadata"]["name"], arrived)
                    self._changed.notify_all()

    def wait_for(self, count: int, timeout: float = 30) -> int:
        """Wait until ``count`` Pods were seen; the time (ns) the last one was."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.seen) >= count, timeout):
                raise RuntimeError(f"only {len(self.seen)} of {count} Pods seen")
            return max(self.seen.values())


def cluster_status(custom: client.CustomObjectsApi) -> dict[str, Any]:
    obj: Any = custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayclusters", NAME)
    return dict(obj.get("status") or {})


def wait_status(custom: client.CustomObjectsApi, workers: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = cluster_status(custom)
        if status.get("state") == "ready" and status.get("readyWorkerReplicas") == workers:
            return
        time.sleep(0.05)
    raise RuntimeError(f"the cluster never showed {workers} ready workers")


def load_spans(directory: Path) -> list[dict[str, Any]]:
    spans = []
    for path in directory.glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            if line.strip():
                spans.append(msgspec.json.decode(line))
    return spans


def hops_of(spans: list[dict[str, Any]], written_ns: int, resource_version: str) -> dict[str, float] | None:
    """The change's hops in ms, from the spans of the trace its projection started."""
    project = [
        s
        for s in spans
        if s["name"] == "watcher.project"
        and s["attributes"].get("raybus.kind") == "RayCluster"
        and s["attributes"].get("k8s.resource_version") == resource_version
    ]
    if not project:
        return None
    p = project[0]
    in_trace = [s for s in spans if s["trace"] == p["trace"]]
    reconciles = sorted((s for s in in_trace if s["name"] == "reconcile"), key=lambda s: s["start"])
    creates = sorted(
        (
            s
            for s in in_trace
            if s["name"] == "applier.create_object" and str(s["attributes"].get("raybus.target", "")).startswith("Pod ")
        ),
        key=lambda s: s["start"],
    )
    if not reconciles or not creates:
        return None
    r, a = reconciles[0], creates[0]
    checks = [s for s in in_trace if s["name"] == "applier.check_batch" and s["parent"] == a["parent"]]
    steps = [p["events"].get(ENTRY_WRITTEN), *(r["events"].get(e) for e in (SNAPSHOT_READ, DECIDED, DECISION_STORED))]
    if not checks or None in steps:
        return None
    written, read, decided, stored = steps
    times = [written_ns, p["start"], written, p["end"], r["start"], read, decided, stored, checks[0]["start"]]
    times += [a["start"], a["end"]]
    ms = 1e-6
    return {
        **{hop: (end - start) * ms for hop, start, end in zip(HOPS, times[:-1], times[1:], strict=True)},
        "applied": (a["end"] - written_ns) * ms,
    }


@contextmanager
def raybus_stack(workdir: Path, *, traced: bool) -> Iterator[Path]:
    """The stack, its services writing their spans to ``workdir/spans`` when ``traced``."""
    launcher: tuple[str, ...] = (sys.executable, "-m", "services.cli.main")
    if traced:
        spans = workdir / "spans"
        spans.mkdir()
        os.environ["RAYBUS_BENCH_SPANS"] = str(spans)
        launcher = (sys.executable, str(REPO / "bench" / "traced.py"))
    with stack(workdir, 1, watcher_args=["--qps", "0"], launcher=launcher) as (_, _nats, kubeconfig):
        yield kubeconfig


@contextmanager
def peer(workdir: Path, python: Path) -> Iterator[Path]:
    with peer_stack(workdir, python) as (_, kubeconfig):
        yield kubeconfig


def run(changes: int, settle: float, *, peer_python: Path | None = None, traced: bool = False) -> dict[str, Any]:
    with stack_dir("latency-bench-") as workdir:
        writes: list[tuple[int, str, int]] = []
        with peer(workdir, peer_python) if peer_python else raybus_stack(workdir, traced=traced) as kubeconfig:
            api = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
            custom = client.CustomObjectsApi(api)
            core = client.CoreV1Api(api)
            body = small_cluster(NAME, workers=1)
            body["spec"]["workerGroupSpecs"][0]["maxReplicas"] = changes + 1
            custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayclusters", body)
            wait_status(custom, 1)
            watch = PodWatch(core, f"ray.io/cluster={NAME}")
            watch.wait_for(2)
            for i in range(changes):
                time.sleep(settle)
                replicas = 2 + i
                patch = [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": replicas}]
                written = time.time_ns()
                obj: Any = custom.patch_namespaced_custom_object(
                    "ray.io", "v1", "default", "rayclusters", NAME, patch, _content_type="application/json-patch+json"
                )
                seen = watch.wait_for(1 + replicas)
                writes.append((written, obj["metadata"]["resourceVersion"], seen))
                wait_status(custom, replicas)
            time.sleep(1.0)  # the exporters' last batch
        spans = load_spans(workdir / "spans") if traced else []
    seen_ms = [(seen - written) * 1e-6 for written, _, seen in writes]
    hops = [
        {**h, "seen": ms}
        for (written, rv, _), ms in zip(writes, seen_ms, strict=True)
        if (h := hops_of(spans, written, rv)) is not None
    ]
    return {"seen_ms": seen_ms, "hops": hops}


def in_pairs(count: int, changes: int, settle: float, peer_python: Path) -> None:
    """``count`` pairs of runs, the peer's then raybus's, each pair after the host's idle publish was timed;
    a line per pair, then in how many raybus was at or below the peer at both p50 and p90."""
    level = 0
    for pair in range(1, count + 1):
        _, idle = publish_round_trips(20, settle)
        theirs = run(changes, settle, peer_python=peer_python)["seen_ms"]
        ours = run(changes, settle)["seen_ms"]
        p50 = percentile(ours, 0.5) / percentile(theirs, 0.5)
        p90 = percentile(ours, 0.9) / percentile(theirs, 0.9)
        level += p50 <= 1 and p90 <= 1
        print(
            f"pair {pair}: an idle publish p50 {statistics.median(idle):.2f} ms; write → Pod seen p50 / p90: "
            f"the peer {percentile(theirs, 0.5):.1f} / {percentile(theirs, 0.9):.1f} ms, raybus "
            f"{percentile(ours, 0.5):.1f} / {percentile(ours, 0.9):.1f} ms (raybus / the peer {p50:.2f} and {p90:.2f})",
            flush=True,
        )
    print(f"raybus at or below the peer at p50 and p90 in {level} of {count} pairs")


def print_seen(seen: list[float], how: str) -> None:
    print(
        f"write → Pod seen on a watch ({len(seen)} changes{how}): p50 {percentile(seen, 0.5):.1f} ms, "
        f"p90 {percentile(seen, 0.9):.1f} ms, p99 {percentile(seen, 0.99):.1f} ms, max {max(seen):.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--settle", type=float, default=0.5, help="seconds of quiet before each change")
    parser.add_argument(
        "--peer",
        type=Path,
        metavar="PYTHON",
        help="measure the Kopf peer (bench/peer) instead, run by this interpreter of its virtualenv",
    )
    parser.add_argument("--pairs", type=int, help="with --peer: the peer and raybus in turn, this many times")
    args = parser.parse_args()
    if args.pairs is not None and not args.peer:
        parser.error("--pairs compares with the peer: give --peer too")
    print(f"machine: {platform.platform()}, {len(os.sched_getaffinity(0))} cpus, python {platform.python_version()}")
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    if args.pairs is not None:
        in_pairs(args.pairs, args.changes, args.settle, args.peer)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        return 0
    print("operator:", "the Kopf peer" if args.peer else "raybus")
    print_seen(run(args.changes, args.settle, peer_python=args.peer)["seen_ms"], "")
    if not args.peer:
        r = run(args.changes, args.settle, traced=True)
        print_seen(r["seen_ms"], ", every span recorded")
        hops = r["hops"]
        applied = [h["applied"] for h in hops]
        print(
            f"write → create applied ({len(hops)} traced): p50 {percentile(applied, 0.5):.1f} ms, "
            f"p90 {percentile(applied, 0.9):.1f} ms, p99 {percentile(applied, 0.99):.1f} ms"
        )
        for hop in HOPS:
            values = [h[hop] for h in hops]
            print(
                f"  {hop:<16} p50 {statistics.median(values):6.2f} ms   p90 {percentile(values, 0.9):6.2f} ms"
                f"   max {max(values):6.2f} ms"
            )
        slowest = max(hops, key=lambda h: h["seen"])
        print(
            f"the slowest change (its Pod seen after {slowest['seen']:.1f} ms, created after"
            f" {slowest['applied']:.1f}): " + ", ".join(f"{hop} {slowest[hop]:.2f}" for hop in HOPS)
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
