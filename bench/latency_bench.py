"""Latency benchmark: one idle RayCluster scaled up by one worker, N times, through the whole stack.

The stack is ``pipeline_bench``'s (every component its own process, kubesim with kubelet ``instant``, one
reconciler, the applier without an API budget); every raybus service runs under ``bench/traced.py``, which
writes its spans to JSON lines. Per change the bench writes ``replicas + 1`` with a JSON patch and waits for
the new worker Pod's ADDED on its own watch, then for the stack to be idle again. Figures: write → Pod seen
(p50/p90/p99), write → create applied (the applier span's end), and the time in each hop, from the spans of
the change's trace (matched by the resourceVersion the patch returned):

- watch: the write until the projection span starts (kubesim, the watch stream, informer decoding);
- projection: the ``watcher.project`` span (KV write, then the WatchEvent publish);
- event: projection end until the ``reconcile`` span starts (the partition's fetch);
- reconcile: the ``reconcile`` span (snapshot read, reconcile, CommandBatch publish);
- command: reconcile end until the ``applier.create_object`` span of the Pod starts (the applier's fetch);
- apply: that span (the API call).

Run: ``.venv/bin/python bench/latency_bench.py [--changes 50] [--settle 0.5] [--peer PYTHON]``; with ``--peer``
the same changes go to the Kopf peer operator of ``bench/peer`` (no spans: only the end-to-end figure).
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.e2e.clusters import small_cluster  # noqa: E402

NAME = "latency"
HOPS = ("watch", "projection", "event", "reconcile", "command", "apply")


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
        buffer = b""
        for chunk in response.stream(4096):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                now = time.time_ns()
                event: dict[str, Any] = msgspec.json.decode(line)
                if event.get("type") == "ADDED":
                    with self._changed:
                        self.seen.setdefault(event["object"]["metadata"]["name"], now)
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
    ms = 1e-6
    return {
        "watch": (p["start"] - written_ns) * ms,
        "projection": (p["end"] - p["start"]) * ms,
        "event": (r["start"] - p["end"]) * ms,
        "reconcile": (r["end"] - r["start"]) * ms,
        "command": (a["start"] - r["end"]) * ms,
        "apply": (a["end"] - a["start"]) * ms,
        "applied": (a["end"] - written_ns) * ms,
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@contextmanager
def traced_stack(workdir: Path) -> Iterator[Path]:
    spans = workdir / "spans"
    spans.mkdir()
    os.environ["RAYBUS_BENCH_SPANS"] = str(spans)
    launcher = (sys.executable, str(REPO / "bench" / "traced.py"))
    with stack(workdir, 1, watcher_args=["--qps", "0"], launcher=launcher) as (_, _nats, kubeconfig):
        yield kubeconfig
    time.sleep(0.5)


@contextmanager
def peer(workdir: Path, python: Path) -> Iterator[Path]:
    with peer_stack(workdir, python) as (_, kubeconfig):
        yield kubeconfig


def run(changes: int, settle: float, peer_python: Path | None = None) -> dict[str, Any]:
    with stack_dir("latency-bench-") as workdir:
        writes: list[tuple[int, str, int]] = []
        with peer(workdir, peer_python) if peer_python else traced_stack(workdir) as kubeconfig:
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
        spans = [] if peer_python else load_spans(workdir / "spans")
    seen_ms = [(seen - written) * 1e-6 for written, _, seen in writes]
    hops = [h for written, rv, _ in writes if (h := hops_of(spans, written, rv)) is not None]
    return {"seen_ms": seen_ms, "hops": hops}


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
    args = parser.parse_args()
    print(f"machine: {platform.platform()}, {len(os.sched_getaffinity(0))} cpus, python {platform.python_version()}")
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print("operator:", "the Kopf peer" if args.peer else "raybus")
    r = run(args.changes, args.settle, args.peer)
    seen = r["seen_ms"]
    print(
        f"write → Pod seen on a watch ({len(seen)} changes): p50 {percentile(seen, 0.5):.1f} ms, "
        f"p90 {percentile(seen, 0.9):.1f} ms, p99 {percentile(seen, 0.99):.1f} ms"
    )
    hops = r["hops"]
    if hops:
        applied = [h["applied"] for h in hops]
        print(
            f"write → create applied ({len(hops)} traced): p50 {percentile(applied, 0.5):.1f} ms, "
            f"p90 {percentile(applied, 0.9):.1f} ms, p99 {percentile(applied, 0.99):.1f} ms"
        )
        for hop in HOPS:
            values = [h[hop] for h in hops]
            print(
                f"  {hop:<11} p50 {statistics.median(values):6.1f} ms   p90 {percentile(values, 0.9):6.1f} ms"
                f"   max {max(values):6.1f} ms"
            )
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
