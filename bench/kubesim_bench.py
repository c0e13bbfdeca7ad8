"""kubesim benchmark: Pod create throughput through the official client, list latency, watch fan-out.

kubesim runs in its own process (``python -m kubesim --kubelet off``), as in ``raybus up``, so the
client and the server do not share a GIL. While N Pods are created by a few client threads, five
watchers (official ``kubernetes.watch.Watch`` streams, ``deserialize=False``) each verify they saw
every ADDED event exactly once and in resourceVersion order. With ``--kubelet instant`` the simulated
kubelet also runs every Pod to Running and Ready (the status writes and their watch events a pipeline
burst costs kubesim), and the figures run until every watcher saw every Pod Ready. ``--ray-pods`` creates
the Pods raybus makes for ``reconcile_bench``'s RayCluster instead of one-container Pods: its head first
(the workers' ``wait-gcs-ready`` waits for its dashboard), then the workers (some 3 KB each), which are
what is counted and watched. ``--kubelet attached`` runs the same simulators in a process of their own
(``python -m kubesim attach``), attached over HTTP to kubesim serving with ``--kubelet off``, and reports
that process's CPU apart.

Run: ``.venv/bin/python bench/kubesim_bench.py [--pods 2000] [--threads 4] [--watchers 5]
[--kubelet instant|attached] [--ray-pods]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from reconcile_bench import converge

REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def kubesim_process(workdir: Path, kubelet: str = "off") -> Iterator[tuple[Path, int]]:
    """Run kubesim in a child process; yields its kubeconfig path and pid."""
    kubeconfig = workdir / "kubeconfig"
    port = _free_port()
    cmd = [sys.executable, "-m", "kubesim", "--port", str(port), "--kubeconfig", str(kubeconfig), "--kubelet", kubelet]
    log = (workdir / "kubesim.log").open("w")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not kubeconfig.exists() or not _accepts(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kubesim did not start: {(workdir / 'kubesim.log').read_text()}")
            time.sleep(0.05)
        yield kubeconfig, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@contextlib.contextmanager
def attached_simulators(kubeconfig: Path, workdir: Path) -> Iterator[int]:
    """Run kubesim's simulators in a child process attached to the API server of ``kubeconfig``; yields its pid
    once the kubelet registered its Node."""
    cmd = [sys.executable, "-m", "kubesim", "attach", "--kubeconfig", str(kubeconfig)]
    log = (workdir / "attach.log").open("w")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    api = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
    try:
        deadline = time.monotonic() + 30
        while not client.CoreV1Api(api).list_node(field_selector="metadata.name=kubesim-node").items:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the simulators did not attach: {(workdir / 'attach.log').read_text()}")
            time.sleep(0.05)
        yield proc.pid
    finally:
        api.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


WORKERS = "ray.io/node-type=worker"
"""The label selector of the worker Pods raybus makes."""


def _ray_pod(node_type: str) -> dict[str, Any]:
    """A Pod as raybus creates it, without what ties it to its RayCluster (kubesim would collect it)."""
    from schema.config import OperatorConfig  # the repository is on the path once reconcile_bench is imported

    pods = converge(1, OperatorConfig())["Pod"].values()
    body = next(p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == node_type)
    metadata = {k: v for k, v in body["metadata"].items() if k in ("name", "labels", "annotations")}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body["spec"]}


def _pod(name: str, template: dict[str, Any] | None = None) -> dict[str, Any]:
    if template is not None:
        return {**template, "metadata": {**template["metadata"], "name": name}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench", "ray.io/cluster": "bench"}},
        "spec": {
            "containers": [{"name": "ray-worker", "image": "rayproject/ray:2.9.0", "ports": [{"containerPort": 8265}]}]
        },
    }


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class Watcher(threading.Thread):
    """One watch stream counting ADDED events (and, if asked, Pods turned Ready) and checking their order."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        resource_version: str,
        expected: int,
        *,
        until_ready: bool,
        selector: str | None,
    ) -> None:
        super().__init__(daemon=True)
        self.selector = selector
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.resource_version = resource_version
        self.expected = expected
        self.until_ready = until_ready
        self.names: set[str] = set()
        self.ready: set[str] = set()
        self.last_rv = 0
        self.in_order = True
        self.first_at = 0.0
        self.last_at = 0.0

    def run(self) -> None:
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            self.core.list_namespaced_pod,
            self.namespace,
            resource_version=self.resource_version,
            label_selector=self.selector,
            timeout_seconds=600,
            deserialize=False,
        )
        for event in stream:
            rv = int(event["object"]["metadata"]["resourceVersion"])
            self.in_order = self.in_order and rv > self.last_rv
            self.last_rv = rv
            name = event["object"]["metadata"]["name"]
            if event["type"] == "ADDED":
                if not self.names:
                    self.first_at = time.perf_counter()
                self.names.add(name)
                self.last_at = time.perf_counter()
            if self.until_ready and _ready(event["object"]):
                self.ready.add(name)
                self.last_at = time.perf_counter()
            if len(self.names) == self.expected and (not self.until_ready or len(self.ready) == self.expected):
                break


def run(pods: int, threads: int, watchers: int, kubelet: str, ray_pods: bool) -> dict[str, float | int | bool | str]:
    """Run every measurement; returns the figures."""
    until_ready = kubelet != "off"
    template = _ray_pod("worker") if ray_pods else None
    selector = WORKERS if ray_pods else None
    with (
        tempfile.TemporaryDirectory(prefix="kubesim-bench-") as tmp,
        kubesim_process(Path(tmp), "off" if kubelet == "attached" else kubelet) as (kubeconfig, pid),
        contextlib.ExitStack() as stack,
    ):
        sims_pid = stack.enter_context(attached_simulators(kubeconfig, Path(tmp))) if kubelet == "attached" else None
        api = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
        api.configuration.connection_pool_maxsize = threads + watchers + 2
        api = client.ApiClient(api.configuration)
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="bench")))
        if ray_pods:
            core.create_namespaced_pod("bench", _ray_pod("head"))  # type: ignore[arg-type]  # a dict body
        listed_meta = core.list_namespaced_pod("bench").metadata
        rv = str(listed_meta.resource_version) if listed_meta is not None else "0"
        streams = [Watcher(api, "bench", rv, pods, until_ready=until_ready, selector=selector) for _ in range(watchers)]
        for stream in streams:
            stream.start()

        def create(index: int) -> None:
            core.create_namespaced_pod("bench", _pod(f"pod-{index:05d}", template))  # type: ignore[arg-type]  # a dict body

        cpu_before = cpu_seconds(pid)
        sims_before = cpu_seconds(sims_pid) if sims_pid is not None else 0.0
        started = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(create, range(pods)))
        created_in = time.perf_counter() - started
        for stream in streams:
            stream.join(timeout=120)
        delivered_in = max(s.last_at for s in streams) - started
        server_cpu = cpu_seconds(pid) - cpu_before
        sims_cpu = cpu_seconds(sims_pid) - sims_before if sims_pid is not None else None

        list_times = []
        for _ in range(5):
            t0 = time.perf_counter()
            listed = core.list_namespaced_pod("bench", label_selector=selector)
            list_times.append(time.perf_counter() - t0)
        raw_times = []
        for _ in range(5):
            t0 = time.perf_counter()
            core.list_namespaced_pod("bench", label_selector=selector, _preload_content=False).read()  # type: ignore[attr-defined]  # raw response
            raw_times.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        replay_stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            core.list_namespaced_pod, "bench", label_selector=selector, timeout_seconds=1, deserialize=False
        )
        replay = list(replay_stream)[:pods]
        replay_in = time.perf_counter() - t0
        api.close()
        return {
            "pods": pods,
            "client_threads": threads,
            "watchers": watchers,
            "create_per_s": pods / created_in,
            "kubelet": kubelet,
            "pod_bytes": len(json.dumps(_pod("pod-00000", template))),
            f"server_cpu_us_per_pod_incl_{watchers}_watch_fanout": server_cpu / pods * 1e6,
            "attached_simulators_cpu_us_per_pod": "-" if sims_cpu is None else sims_cpu / pods * 1e6,
            "watch_delivery_done_s": delivered_in,
            "every_watcher_saw_every_event": all(len(s.names) == pods for s in streams),
            "every_watcher_saw_every_pod_ready": all(len(s.ready) == pods for s in streams) if until_ready else "-",
            "events_in_order": all(s.in_order for s in streams),
            "list_items": len(listed.items),
            "list_ms_deserialized": statistics.median(list_times) * 1000,
            "list_ms_raw": statistics.median(raw_times) * 1000,
            "watch_initial_events": len(replay),
            "watch_initial_s_incl_1s_timeout": replay_in,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--watchers", type=int, default=5)
    parser.add_argument(
        "--kubelet",
        choices=("off", "instant", "attached"),
        default="off",
        help="run Pods to Ready: instant (in kubesim), attached (simulators in their own process, over HTTP)",
    )
    parser.add_argument("--ray-pods", action="store_true", help="create raybus's worker Pods, not a minimal one")
    args = parser.parse_args()
    figures = run(args.pods, args.threads, args.watchers, args.kubelet, args.ray_pods)
    print(f"machine: {platform.uname().system} {platform.uname().release} {platform.machine()}, cpus={os.cpu_count()}")
    print(f"python: {platform.python_version()}")
    for key, value in figures.items():
        print(f"{key}: {value:.1f}" if isinstance(value, float) else f"{key}: {value}")
    ok = figures["every_watcher_saw_every_event"] and figures["events_in_order"]
    ok = ok and figures["every_watcher_saw_every_pod_ready"] in (True, "-")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
