"""kubesim benchmark: Pod create throughput through the official client, list latency, watch fan-out.

kubesim runs in its own process (``python -m kubesim --kubelet off``), as in ``raybus up``, so the
client and the server do not share a GIL. While N Pods are created by a few client threads, five
watchers (official ``kubernetes.watch.Watch`` streams, ``deserialize=False``) each verify they saw
every ADDED event exactly once and in resourceVersion order.

Run: ``.venv/bin/python bench/kubesim_bench.py [--pods 2000] [--threads 4] [--watchers 5]``.
"""

from __future__ import annotations

import argparse
import contextlib
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
def kubesim_process(workdir: Path) -> Iterator[tuple[Path, int]]:
    """Run kubesim in a child process; yields its kubeconfig path and pid."""
    kubeconfig = workdir / "kubeconfig"
    port = _free_port()
    cmd = [sys.executable, "-m", "kubesim", "--port", str(port), "--kubeconfig", str(kubeconfig), "--kubelet", "off"]
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


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench", "ray.io/cluster": "bench"}},
        "spec": {
            "containers": [{"name": "ray-worker", "image": "rayproject/ray:2.9.0", "ports": [{"containerPort": 8265}]}]
        },
    }


class Watcher(threading.Thread):
    """One watch stream counting ADDED events and checking their order."""

    def __init__(self, api: client.ApiClient, namespace: str, resource_version: str, expected: int) -> None:
        super().__init__(daemon=True)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.resource_version = resource_version
        self.expected = expected
        self.names: set[str] = set()
        self.last_rv = 0
        self.in_order = True
        self.first_at = 0.0
        self.last_at = 0.0

    def run(self) -> None:
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            self.core.list_namespaced_pod,
            self.namespace,
            resource_version=self.resource_version,
            timeout_seconds=600,
            deserialize=False,
        )
        for event in stream:
            rv = int(event["object"]["metadata"]["resourceVersion"])
            self.in_order = self.in_order and rv > self.last_rv
            self.last_rv = rv
            if event["type"] == "ADDED":
                if not self.names:
                    self.first_at = time.perf_counter()
                self.names.add(event["object"]["metadata"]["name"])
                self.last_at = time.perf_counter()
                if len(self.names) == self.expected:
                    break


def run(pods: int, threads: int, watchers: int) -> dict[str, float | int | bool]:
    """Run every measurement; returns the figures."""
    with tempfile.TemporaryDirectory(prefix="kubesim-bench-") as tmp, kubesim_process(Path(tmp)) as (kubeconfig, pid):
        api = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
        api.configuration.connection_pool_maxsize = threads + watchers + 2
        api = client.ApiClient(api.configuration)
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="bench")))
        listed_meta = core.list_namespaced_pod("bench").metadata
        rv = str(listed_meta.resource_version) if listed_meta is not None else "0"
        streams = [Watcher(api, "bench", rv, pods) for _ in range(watchers)]
        for stream in streams:
            stream.start()

        def create(index: int) -> None:
            core.create_namespaced_pod("bench", _pod(f"pod-{index:05d}"))  # type: ignore[arg-type]  # a dict body

        cpu_before = cpu_seconds(pid)
        started = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(create, range(pods)))
        created_in = time.perf_counter() - started
        for stream in streams:
            stream.join(timeout=120)
        delivered_in = max(s.last_at for s in streams) - started
        server_cpu = cpu_seconds(pid) - cpu_before

        list_times = []
        for _ in range(5):
            t0 = time.perf_counter()
            listed = core.list_namespaced_pod("bench")
            list_times.append(time.perf_counter() - t0)
        raw_times = []
        for _ in range(5):
            t0 = time.perf_counter()
            core.list_namespaced_pod("bench", _preload_content=False).read()  # type: ignore[attr-defined]  # raw response
            raw_times.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        replay_stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            core.list_namespaced_pod, "bench", timeout_seconds=1, deserialize=False
        )
        replay = list(replay_stream)[:pods]
        replay_in = time.perf_counter() - t0
        api.close()
        return {
            "pods": pods,
            "client_threads": threads,
            "watchers": watchers,
            "create_per_s": pods / created_in,
            "server_cpu_us_per_create_incl_5_watch_fanout": server_cpu / pods * 1e6,
            "watch_delivery_done_s": delivered_in,
            "every_watcher_saw_every_event": all(len(s.names) == pods for s in streams),
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
    args = parser.parse_args()
    figures = run(args.pods, args.threads, args.watchers)
    print(f"machine: {platform.uname().system} {platform.uname().release} {platform.machine()}, cpus={os.cpu_count()}")
    print(f"python: {platform.python_version()}")
    for key, value in figures.items():
        print(f"{key}: {value:.1f}" if isinstance(value, float) else f"{key}: {value}")
    ok = figures["every_watcher_saw_every_event"] and figures["events_in_order"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
