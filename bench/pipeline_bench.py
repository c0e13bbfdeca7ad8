"""Pipeline benchmark: N RayClusters (1 head + 3 workers) created at once, through the whole stack.

Every component runs as its own process, as in production and ``raybus up``: nats-server, kubesim
(kubelet ``instant``), the watcher's three roles (``raybus watcher --roles watch``, ``--roles apply``,
``--roles probe``; ``--combined-watcher`` runs one ``raybus watcher`` with all three), ``raybus status``
(SQLite) and 1 or 2 ``raybus reconciler`` workers. Figures: time until every cluster is ``ready``,
reconciles/s (every decision is a CommandBatch on RAYBUS_COMMANDS, so they are counted there), latency
from the watch event to the applied command (per decision with commands: the last command result's time
minus the earliest input's watch time), CPU seconds and peak RSS per process; and, as the ceiling,
kubesim's raw Pod-create rate with the official client in the same run.

``--api real`` runs the same stack against the real API server instead of kubesim (``bench/realapi.py``:
etcd, kube-apiserver and kube-controller-manager of the pinned release, kubesim's simulators attached over
HTTP as its kubelet); the services use its admin kubeconfig, and the ceiling is its raw Pod-create rate.

Run: ``.venv/bin/python bench/pipeline_bench.py [--clusters 1000] [--workers 1 2] [--threads 4] [--api real]``.
With ``RAYBUS_BENCH_KEEP=1`` (here and in the benches built on this stack) the stack's working directory,
with every process's log, is kept and named on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import nats
from cpuquota import CpuQuotas
from follow import Follow
from kubernetes import client, config
from kubesim_bench import _accepts, _free_port, _pod, cpu_seconds, kubesim_process
from realapi import bare_plane, node_registered, real_plane, simulators_argv

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from schema import subjects  # noqa: E402
from schema.codec import decode_batch, decode_input, decode_results  # noqa: E402
from schema.crd import write_crds  # noqa: E402
from schema.messages import TimerTick, WatchEvent  # noqa: E402
from services.runtime.assignment import owner_of  # noqa: E402
from services.runtime.kvread import read_latest  # noqa: E402
from services.runtime.natsbin import nats_server_binary, nats_server_environment  # noqa: E402
from services.runtime.settings import RESULT_BATCHES_ENV  # noqa: E402
from tests.e2e.clusters import small_cluster  # noqa: E402
from tests.helpers import stored_messages  # noqa: E402


def peak_rss_mb(pid: int) -> float:
    """Peak resident set size of a live process (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes] | None
    """None: a process another owner starts and stops (the real API server's programs), only sampled."""
    observed_pid: int = 0
    """The process id when ``popen`` is None."""
    restart: Callable[[], subprocess.Popen[bytes]] | None = None
    """Starts it again after it exited (as a Deployment would); None: it is not restarted."""
    restarts: int = 0
    earlier_cpu: float = 0.0
    """CPU seconds of the incarnations that exited (as last sampled)."""
    cpu: float = 0.0
    peak: float = 0.0
    """The highest peak RSS of every incarnation."""

    @property
    def pid(self) -> int:
        """The process id of the live incarnation."""
        return self.popen.pid if self.popen is not None else self.observed_pid

    def sample(self) -> None:
        """Read the figures of the live process; they are kept when it exits."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            self.cpu = cpu_seconds(self.pid)
            self.peak = max(self.peak, peak_rss_mb(self.pid))

    def usage(self) -> tuple[float, float]:
        """CPU seconds of every incarnation, and the highest peak RSS among them."""
        self.sample()
        return self.earlier_cpu + self.cpu, self.peak


@dataclass
class Stack:
    workdir: Path
    procs: list[Proc] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)

    def spawn(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        preexec: Callable[[], None] | None = None,
        restart: bool = False,
    ) -> Proc:
        def start(argv: list[str]) -> subprocess.Popen[bytes]:
            with (self.workdir / f"{name}.log").open("ab") as log:
                return subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env, preexec_fn=preexec
                )

        # Started again on any free health port: its own may have been taken meanwhile (kubesim's
        # simulated dashboards bind ports too).
        again = [*argv]
        if "--health-port" in again:
            again[again.index("--health-port") + 1] = "0"
        proc = Proc(name, start(argv), restart=functools.partial(start, again) if restart else None)
        self.procs.append(proc)
        return proc

    def observe(self, name: str, pid: int) -> None:
        """Sample a process the stack does not own (its owner stops it) with the stack's own."""
        self.procs.append(Proc(name, None, observed_pid=pid))

    def supervise(self) -> None:
        """In a thread until :meth:`stop`: sample every process each second and start again a restartable
        one that exited, as Kubernetes restarts a crashed container."""

        def loop() -> None:
            started = time.perf_counter()
            while not self._stopping.wait(1.0):
                for proc in self.procs:
                    proc.sample()
                    if proc.popen is None:
                        continue
                    code = proc.popen.poll()
                    if code is not None and proc.restart is not None and not self._stopping.is_set():
                        progress(f"{proc.name} exited with {code}; restarted", started)
                        proc.earlier_cpu += proc.cpu
                        proc.cpu = 0.0
                        proc.restarts += 1
                        proc.popen = proc.restart()

        threading.Thread(target=loop, daemon=True).start()

    def stop(self) -> None:
        self._stopping.set()
        owned = [proc.popen for proc in reversed(self.procs) if proc.popen is not None]
        for popen in owned:
            with contextlib.suppress(ProcessLookupError):
                popen.terminate()
        for popen in owned:
            try:
                popen.wait(30)
            except subprocess.TimeoutExpired:
                popen.kill()


def wait_for(check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not come up")


def ready(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=1) as response:
        return bool(response.status == 200)


API_SERVERS = ("kubesim", "real")
"""What a stack's API server is: kubesim with its kubelet ``instant``, or the real one (``realapi``)."""

API_SIDE = frozenset({"kubesim", "etcd", "kube-apiserver", "kube-controller-manager", "simulators"})
"""The processes that stand in for Kubernetes: not the operator's cost."""


def start_api(s: Stack, server: str, scope: contextlib.ExitStack) -> Path:
    """The stack's API server (``API_SERVERS``), its Pods run by a simulated kubelet; its admin kubeconfig.
    The real one is stopped when ``scope`` closes."""
    if server == "kubesim":
        return start_kubesim(s)
    plane = scope.enter_context(real_plane(s.workdir))
    for name, pid in plane.pids.items():
        s.observe(name, pid)
    s.spawn("simulators", simulators_argv(plane))
    wait_for(lambda: node_registered(plane.kubeconfig), "the simulators' Node")
    return plane.kubeconfig


def start_kubesim(s: Stack) -> Path:
    """kubesim (kubelet ``instant``, raybus's CRDs) in the stack; its kubeconfig."""
    crds = s.workdir / "crds"
    write_crds(crds)
    kubeconfig = s.workdir / "kubeconfig"
    port = _free_port()
    argv = [sys.executable, "-m", "kubesim", "--port", str(port), "--kubeconfig", str(kubeconfig)]
    s.spawn("kubesim", [*argv, "--kubelet", "instant", "--crds", str(crds)])
    wait_for(lambda: kubeconfig.exists() and _accepts(port), "kubesim")
    return kubeconfig


@contextlib.contextmanager
def peer_stack(workdir: Path, python: Path) -> Iterator[tuple[Stack, Path]]:
    """kubesim and the Kopf peer operator (``bench/peer``, run by ``python`` from its own virtualenv)."""
    s = Stack(workdir)
    try:
        kubeconfig = start_kubesim(s)
        health = _free_port()
        operator = REPO / "bench" / "peer" / "operator.py"
        argv = [str(python), "-m", "kopf", "run", "--standalone", "--all-namespaces", "--quiet"]
        argv += ["--liveness", f"http://127.0.0.1:{health}/healthz", str(operator)]
        s.spawn("peer", argv, env={**os.environ, "KUBECONFIG": str(kubeconfig)})
        wait_for(lambda: ready(f"http://127.0.0.1:{health}/healthz"), "the peer operator")
        yield s, kubeconfig
    finally:
        s.stop()


@dataclass(frozen=True)
class Layout:
    """Which raybus processes a stack runs, and under what CPU limit."""

    reconcilers: int = 1
    appliers: int = 1
    probers: int = 1
    combined_watcher: bool = False
    """One ``raybus watcher`` with all three roles instead of ``watch``, ``applier-i`` and ``prober-i``."""
    cpu_share: float | None = None
    """Each replica of a scalable stage (reconciler, applier, prober) limited to this share of a core."""


STAGE_GROUPS: dict[str, subjects.LeaseGroup] = {"reconciler": "reconcile", "applier": "apply", "prober": "probe"}
"""The scalable stages and the lease group whose partitions their replicas share."""


def balanced_ids(stage: str, replicas: int, partitions: int = subjects.DEFAULT_PARTITIONS) -> list[str]:
    """Worker ids ``<stage>-<i>`` (with a suffix when needed) among which rendezvous hashing splits the
    partitions as evenly as it can: with arbitrary ids 4 replicas get shares like 6/5/3/2 of 16, and the
    largest share, not the replica count, sets the throughput."""
    fair = -(-partitions // replicas)
    for attempt in range(100_000):
        ids = [f"{stage}-{i + 1}" + (f"-{attempt}" if attempt else "") for i in range(replicas)]
        shares = Counter(owner_of(p, ids) for p in range(partitions))
        if max(shares.values()) <= fair and len(shares) == replicas:
            return ids
    raise RuntimeError(f"no even split of {partitions} partitions among {replicas} {stage}s")


async def partitions_settled(nats_url: str, members: dict[subjects.LeaseGroup, list[str]]) -> bool:
    """Every partition of each group is leased to the member rendezvous hashing assigns it."""
    nc = await nats.connect(nats_url)
    try:
        for group, ids in members.items():
            read = await read_latest(nc, subjects.LEASES_BUCKET, subjects.leases_filter(group))
            held = {int(key.rsplit(".", 1)[1]): value.decode() for key, value in read.values.items()}
            if held != {p: owner_of(p, ids) for p in range(subjects.DEFAULT_PARTITIONS)}:
                return False
        return True
    finally:
        await nc.close()


KEEP_ENV = "RAYBUS_BENCH_KEEP"
"""Set to keep a stack's working directory (the processes' logs) after the run."""


@contextlib.contextmanager
def stack_dir(prefix: str) -> Iterator[Path]:
    """A fresh working directory for a stack: removed afterwards, unless ``RAYBUS_BENCH_KEEP`` is set."""
    if os.environ.get(KEEP_ENV):
        path = Path(tempfile.mkdtemp(prefix=prefix))
        print(f"the stack's logs are kept in {path}", file=sys.stderr, flush=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


@contextlib.contextmanager
def stack(
    workdir: Path,
    reconcilers: int,
    *,
    db_url: str | None = None,
    watcher_args: Sequence[str] = (),
    launcher: Sequence[str] = (sys.executable, "-m", "services.cli.main"),
    layout: Layout | None = None,
    api_server: str = "kubesim",
) -> Iterator[tuple[Stack, str, Path]]:
    """The processes of a pipeline; the status service on ``db_url`` (default: SQLite in ``workdir``);
    each raybus service started as ``launcher <service> …``. The watcher runs as its three role processes,
    as ``raybus up`` and deploy/ run it (``watch``, ``applier-i``, ``prober-i``), each given ``watcher_args``,
    unless ``layout`` combines them; ``layout`` also sets the replicas (its ``reconcilers`` is replaced by
    the argument) and their CPU limit. ``api_server`` names the API server (``API_SERVERS``); the services use its
    admin kubeconfig either way. Yields once every partition is leased as the replicas share them."""
    layout = dataclasses.replace(layout or Layout(), reconcilers=reconcilers)
    quotas = CpuQuotas(layout.cpu_share) if layout.cpu_share else None
    s = Stack(workdir)
    plane_scope = contextlib.ExitStack()
    try:
        port = _free_port()
        argv = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(workdir / "js")]
        s.spawn("nats-server", argv, env={**os.environ, **nats_server_environment()})
        wait_for(lambda: _accepts(port), "nats-server")
        nats_url = f"nats://127.0.0.1:{port}"
        kubeconfig = start_api(s, api_server, plane_scope)
        kube = ["--kubeconfig", str(kubeconfig), *watcher_args]
        db = db_url or f"sqlite+aiosqlite:///{workdir}/raybus.db"
        members: dict[subjects.LeaseGroup, list[str]] = {}
        for stage, count in (("applier", layout.appliers), ("prober", layout.probers)):
            members[STAGE_GROUPS[stage]] = balanced_ids(stage, count)
        members["reconcile"] = balanced_ids("reconciler", layout.reconcilers)
        services: list[tuple[str, list[str]]] = []
        if layout.combined_watcher:
            members = {"reconcile": members["reconcile"], "apply": ["watcher"], "probe": ["watcher"]}
            services.append(("watcher", ["watcher", "--worker-id", "watcher", *kube]))
        else:
            services.append(("watch", ["watcher", "--roles", "watch", "--worker-id", "watch", *kube]))
            for i, worker in enumerate(members["apply"]):
                services.append((f"applier-{i + 1}", ["watcher", "--roles", "apply", "--worker-id", worker, *kube]))
            for i, worker in enumerate(members["probe"]):
                services.append((f"prober-{i + 1}", ["watcher", "--roles", "probe", "--worker-id", worker, *kube]))
        services.append(("status", ["status", "--db-url", db, "--http-port", str(_free_port())]))
        for i, worker in enumerate(members["reconcile"]):
            services.append((f"reconciler-{i + 1}", ["reconciler", "--worker-id", worker]))
        for name, (command, *extra) in services:
            health = _free_port()
            common = ["--nats-url", nats_url, "--health-port", str(health), "--log-level", "WARNING"]
            limited = quotas is not None and name.split("-")[0] in STAGE_GROUPS
            join = quotas.group(name) if quotas is not None and limited else None
            # one build reads every message, as under ``raybus up``: results go out batched
            env = {**os.environ, RESULT_BATCHES_ENV: "true"}
            s.spawn(name, [*launcher, command, *common, *extra], env=env, preexec=join, restart=True)
            wait_for(lambda h=health: ready(f"http://127.0.0.1:{h}/readyz"), name, timeout=300 if limited else 60)
        wait_for(lambda: asyncio.run(partitions_settled(nats_url, members)), "the partitions' leases", timeout=300)
        s.supervise()
        yield s, nats_url, kubeconfig
    finally:
        s.stop()
        if quotas is not None:
            quotas.remove()
        plane_scope.close()  # the real API server outlives its clients, the stack's processes


def count_ready(api: client.ApiClient) -> int:
    response = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "ray.io", "v1", "default", "rayclusters", _preload_content=False
    )
    items = msgspec.json.decode(response.read())["items"]  # type: ignore[attr-defined]  # raw response
    return sum(1 for c in items if (c.get("status") or {}).get("state") == "ready")


async def stream_figures(nats_url: str) -> dict[str, Any]:
    """Decisions and watch-event → applied-command latencies, read back from the streams."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()

    event_time: dict[int, datetime] = {}
    inputs_by_kind: Counter[str] = Counter()
    for msg in await stored_messages(js, subjects.EVENTS_STREAM, timeout=10):
        if msg.subject.startswith(subjects.TIMERS_PREFIX):
            continue  # a key's pending schedule, not an input
        with contextlib.suppress(Exception):
            event = decode_input(msg.data)
            stamp = getattr(event, "observed_at", None) or getattr(event, "due_at", None)
            if isinstance(stamp, datetime):
                event_time[msg.metadata.sequence.stream] = stamp
            if isinstance(event, WatchEvent):
                what = f"{event.event_type} {event.entry_kind}"
            elif isinstance(event, TimerTick):
                what = f"TimerTick ({event.reason or 'wake-up'})"
            else:
                what = type(event).__name__
            inputs_by_kind[what] += 1
    commands = await stored_messages(js, subjects.COMMANDS_STREAM, timeout=10)
    batches = {m.metadata.sequence.stream: decode_batch(m.data) for m in commands}
    applied: dict[int, datetime] = {}
    results = 0
    outcomes: dict[str, int] = {}
    pod_creates: list[datetime] = []
    result_messages = await stored_messages(js, subjects.RESULTS_STREAM, timeout=10)
    for result in (r for msg in result_messages for r in decode_results(msg.data)):
        results += 1
        if result.verb == "create_object" and result.outcome == "applied" and result.target.startswith("Pod "):
            pod_creates.append(result.at)
        outcomes[f"{result.verb}/{result.outcome}"] = outcomes.get(f"{result.verb}/{result.outcome}", 0) + 1
        if result.batch_seq:
            applied[result.batch_seq] = max(applied.get(result.batch_seq, result.at), result.at)
    await nc.close()
    latencies = []
    for seq, batch in batches.items():
        inputs = [event_time[i] for i in batch.inputs if i in event_time]
        if batch.commands and seq in applied and inputs:
            latencies.append((applied[seq] - min(inputs)).total_seconds())
    latencies.sort()
    return {
        "decisions": len(batches),
        "decisions_by_kind": dict(Counter(b.key.kind for b in batches.values())),
        "decisions_with_commands": sum(1 for b in batches.values() if b.commands),
        "commands": sum(len(b.commands) for b in batches.values()),
        "results": results,
        "result_messages": len(result_messages),
        "outcomes": dict(sorted(outcomes.items(), key=lambda kv: -kv[1])),
        "suppressed": sum(len(b.suppressed) for b in batches.values()),
        "events": len(event_time),
        "pod_creates": len(pod_creates),
        "pod_create_span_s": (max(pod_creates) - min(pod_creates)).total_seconds() if len(pod_creates) > 1 else 0.0,
        "inputs_by_kind": dict(inputs_by_kind.most_common()),
        "latency_p50_ms": 1000 * statistics.median(latencies) if latencies else 0.0,
        "latency_p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))] if latencies else 0.0,
    }


@contextlib.contextmanager
def profiling(procs: Sequence[Proc], directory: Path | None) -> Iterator[None]:
    """Sample every Python process of the stack with py-spy (``pip install py-spy``) while the block runs;
    one collapsed-stack file per process in ``directory`` (nothing when it is None)."""
    if directory is None:
        yield
        return
    directory.mkdir(parents=True, exist_ok=True)
    spy = str(Path(sys.executable).parent / "py-spy")
    spies = [
        subprocess.Popen(
            [
                spy,
                "record",
                "--pid",
                str(p.pid),
                "--rate",
                "50",
                "--nonblocking",
                "--format",
                "raw",
                "--output",
                str(directory / f"{p.name}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for p in procs
        if p.name != "nats-server" and p.popen is not None  # Go programs: nats-server and the real API server's
    ]
    try:
        yield
    finally:
        for process in spies:
            process.send_signal(signal.SIGINT)
        for process in spies:
            process.wait(30)


def process_figures(
    s: Stack, before: dict[str, float], usage: dict[str, tuple[float, float]]
) -> dict[str, dict[str, float]]:
    """Per process: CPU seconds since ``before``, peak RSS, and how often it was restarted."""
    restarts = {p.name: p.restarts for p in s.procs}
    return {
        name: {"cpu_s": cpu - before[name], "peak_rss_mb": rss, "restarts": restarts[name]}
        for name, (cpu, rss) in usage.items()
    }


def progress(what: str, started: float) -> None:
    """A line on stderr while a long run goes on (stdout keeps the figures)."""
    print(f"[{time.perf_counter() - started:7.1f} s] {what}", file=sys.stderr, flush=True)


def burst(s: Stack, kubeconfig: Path, clusters: int, threads: int, timeout: float) -> dict[str, Any]:
    """Create the clusters at once and wait until all are ready; times, and CPU and peak RSS per process."""
    api = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
    api.configuration.connection_pool_maxsize = threads + 2
    api = client.ApiClient(api.configuration)
    custom = client.CustomObjectsApi(api)
    before = {p.name: p.usage()[0] for p in s.procs}

    def create(i: int) -> None:
        custom.create_namespaced_custom_object(
            "ray.io", "v1", "default", "rayclusters", small_cluster(f"bench-{i:04d}", workers=3)
        )

    with Follow(api, "rayclusters", lambda c: (c.get("status") or {}).get("state") or "") as follow:
        started = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(create, range(clusters)))
        created_in = time.perf_counter() - started
        done = 0
        while time.perf_counter() - started < timeout:
            done = follow.counts()["ready"]
            progress(f"{done}/{clusters} ready", started)
            if done == clusters and count_ready(api) == clusters:
                break
            time.sleep(0.5)
        all_ready_in = time.perf_counter() - started
    usage = {p.name: p.usage() for p in s.procs}
    progress(" ".join(f"{name} {cpu:.1f}s/{rss:.0f}MB" for name, (cpu, rss) in usage.items()), started)
    api.close()
    return {
        "clusters": clusters,
        "pods": clusters * 4,
        "created_in_s": created_in,
        "ready": done,
        "all_ready_in_s": all_ready_in,
        "processes": process_figures(s, before, usage),
    }


def run_pipeline(
    clusters: int,
    reconcilers: int,
    threads: int,
    timeout: float,
    qps: float,
    profile: Path | None = None,
    layout: Layout | None = None,
    api_server: str = "kubesim",
) -> dict[str, Any]:
    with (
        stack_dir("pipeline-bench-") as tmp,
        stack(tmp, reconcilers, watcher_args=["--qps", str(qps)], layout=layout, api_server=api_server) as (
            s,
            nats_url,
            kubeconfig,
        ),
        profiling(s.procs, profile),
    ):
        r = burst(s, kubeconfig, clusters, threads, timeout)
        figures = asyncio.run(stream_figures(nats_url))
    return {**r, "reconcilers": reconcilers, "reconciles_per_s": figures["decisions"] / r["all_ready_in_s"], **figures}


def run_peer(clusters: int, threads: int, timeout: float, python: Path, profile: Path | None = None) -> dict[str, Any]:
    """The same burst against the Kopf peer operator."""
    with (
        stack_dir("peer-bench-") as tmp,
        peer_stack(tmp, python) as (s, kubeconfig),
        profiling(s.procs, profile),
    ):
        return burst(s, kubeconfig, clusters, threads, timeout)


def pod_create_ceiling(pods: int, threads: int, api_server: str = "kubesim") -> float:
    """The API server's raw Pod-create rate through the official client, no kubelet running them: kubesim
    (kubelet off) or the real one (``API_SERVERS``)."""
    server = kubesim_process if api_server == "kubesim" else bare_plane
    with tempfile.TemporaryDirectory(prefix="ceiling-") as tmp, server(Path(tmp)) as (kubeconfig, _):
        api = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
        api.configuration.connection_pool_maxsize = threads + 2
        core = client.CoreV1Api(client.ApiClient(api.configuration))
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="bench")))
        started = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            # A dict body: the client sends it as it is.
            create = core.create_namespaced_pod
            list(pool.map(lambda i: create("bench", _pod(f"pod-{i:05d}")), range(pods)))  # type: ignore[arg-type]
        return pods / (time.perf_counter() - started)


def print_flow(r: dict[str, Any]) -> None:
    """What every pipeline bench prints last: inputs by kind, withheld commands and outcomes, event-to-applied
    latency, and CPU and peak memory per process."""
    print(f"  inputs {r['inputs_by_kind']}")
    print(f"  suppressed as in flight {r['suppressed']}; outcomes {r['outcomes']}")
    print(f"  watch event → command applied: p50 {r['latency_p50_ms']:.0f} ms, p99 {r['latency_p99_ms']:.0f} ms")
    print_usage(r["processes"])


def print_usage(processes: dict[str, dict[str, float]]) -> None:
    """CPU seconds and peak RSS per process, and their sums without the API server's side (``API_SIDE``: the
    operator's own cost) and, when that side is several processes, its own sums."""
    width = max(14, *(len(name) for name in processes))
    for name, u in processes.items():
        restarted = f"   restarted {u['restarts']:.0f} times" if u.get("restarts") else ""
        print(f"  {name:<{width}} cpu {u['cpu_s']:6.1f} s   peak rss {u['peak_rss_mb']:6.0f} MB{restarted}")
    own = [u for name, u in processes.items() if name not in API_SIDE]
    cpu, rss = sum(u["cpu_s"] for u in own), sum(u["peak_rss_mb"] for u in own)
    side = [name for name in processes if name in API_SIDE]
    but = ", ".join(side)
    print(f"  {'operator sum':<{width}} cpu {cpu:6.1f} s   peak rss {rss:6.0f} MB   (every process but {but})")
    if len(side) > 1:
        cpu = sum(processes[name]["cpu_s"] for name in side)
        rss = sum(processes[name]["peak_rss_mb"] for name in side)
        print(f"  {'API side sum':<{width}} cpu {cpu:6.1f} s   peak rss {rss:6.0f} MB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument(
        "--qps",
        type=float,
        default=0,
        help="the applier's API budget (raybus watcher --qps); 0, the default here, measures the pipeline "
        "itself: at KubeRay's 100 qps, 1000 clusters' ~12,000 API calls alone take 120 s",
    )
    parser.add_argument(
        "--profile", type=Path, help="write a py-spy profile of every Python process of each run to this folder"
    )
    parser.add_argument(
        "--peer",
        type=Path,
        metavar="PYTHON",
        help="also run the burst against the Kopf peer (bench/peer) with this interpreter of its virtualenv",
    )
    parser.add_argument("--no-ceiling", action="store_true", help="skip the API server's raw Pod-create rate")
    parser.add_argument(
        "--api",
        choices=API_SERVERS,
        default="kubesim",
        help="the API server: kubesim, or real (etcd, kube-apiserver and kube-controller-manager of the pinned "
        "release, kubesim's simulators attached as its kubelet)",
    )
    parser.add_argument(
        "--combined-watcher", action="store_true", help="one raybus watcher process with all three roles"
    )
    args = parser.parse_args()
    if args.peer and args.api != "kubesim":
        parser.error("the Kopf peer runs against kubesim only")
    layout = Layout(combined_watcher=args.combined_watcher)
    cpus = len(os.sched_getaffinity(0))
    print(f"machine: {platform.platform()}, {cpus} cpus, python {platform.python_version()}")
    print(f"load average: {os.getloadavg()[0]:.1f}")
    print(f"API server: {args.api}")
    ceiling = float("nan") if args.no_ceiling else pod_create_ceiling(args.clusters * 4, args.threads, args.api)
    print(f"ceiling: {args.api} raw Pod creates/s with the official client ({args.threads} threads): {ceiling:.0f}")
    if args.peer:
        profile = args.profile / "peer" if args.profile else None
        peer = run_peer(args.clusters, args.threads, args.timeout, args.peer, profile)
        print(
            f"\npeer (Kopf): {peer['ready']}/{peer['clusters']} clusters ready in {peer['all_ready_in_s']:.1f} s "
            f"(created in {peer['created_in_s']:.1f} s)"
        )
        print_usage(peer["processes"])
    print(f"applier qps: {args.qps:g} (0 = unlimited)")
    for workers in args.workers:
        profile = args.profile / f"{workers}-reconcilers" if args.profile else None
        r = run_pipeline(args.clusters, workers, args.threads, args.timeout, args.qps, profile, layout, args.api)
        pods_per_s = r["pods"] / r["all_ready_in_s"]
        print(
            f"\n{workers} reconciler(s): {r['ready']}/{r['clusters']} clusters ready ({r['pods']} pods) "
            f"in {r['all_ready_in_s']:.1f} s (created in {r['created_in_s']:.1f} s); "
            f"{pods_per_s:.0f} pods ready/s = {100 * pods_per_s / ceiling:.0f}% of the ceiling"
        )
        print(
            f"  decisions {r['decisions']} ({r['reconciles_per_s']:.0f}/s), "
            f"with commands {r['decisions_with_commands']}, commands {r['commands']}, "
            f"results {r['results']} in {r['result_messages']} messages, events {r['events']}"
        )
        span = r["pod_create_span_s"]
        if span:
            rate = r["pod_creates"] / span
            print(
                f"  Pod creates applied: {r['pod_creates']} in {span:.1f} s (first to last) = {rate:.0f}/s"
                f" = {100 * rate / ceiling:.0f}% of the ceiling"
            )
        print_flow(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
