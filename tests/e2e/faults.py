"""A fault-injection run of the whole stack, every component its own process (the e2e test and
``bench/fault_bench.py`` share it).

nats-server, kubesim (kubelet ``instant``), ``raybus watcher`` (drift checks every
:data:`CHECK_INTERVAL` seconds), two ``raybus reconciler`` workers and ``raybus status`` (SQLite).
RayClusters of 1 head and 3 workers are created in four bursts; right after each burst one component is
killed with SIGKILL and restarted (a reconciler: a third worker starts instead; the watcher; nats-server
on its file store; the status service), and the run waits until every cluster created so far is ready.
Then, while the batches the killed watcher left unfinished are still waiting for their redelivery, some
clusters are scaled down to 1 worker and some deleted, and the run waits until everything converged and
every consumer drained. (:func:`run_burst` is the other scenario: every cluster at once.)

A watch on Pods counts every create by name, so the figures say what really reached the API server:
creates against the minimum (each cluster's head and 3 workers once: every cluster was ready before it
was scaled or deleted), names created twice, Pods left for deleted clusters.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import nats
from kubernetes import client, watch

from schema import subjects
from tests.e2e.clusters import small_cluster
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import Processes, Service, running_processes, wait
from tests.helpers import work_consumers
from tests.kubeobjects import meta

GROUP, VERSION, PLURAL, NAMESPACE = "ray.io", "v1", "rayclusters", "default"
WORKERS = 3
CHECK_INTERVAL = 30
"""The watcher's drift check interval here: a run lasts minutes, so drift a kill left must be repaired
within one (the default, 300 s, is for a cluster that runs for days)."""
KILLED = ("reconciler", "watcher", "nats-server", "status")
"""What each burst is followed by a kill -9 of, in order."""


class PodCreates:
    """Every Pod ADDED on the API server, by name, from a watch started before the first create."""

    def __init__(self, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)
        self.added: Counter[str] = Counter()
        self._stop = threading.Event()
        pods = self._core.list_namespaced_pod(NAMESPACE)
        assert pods.metadata is not None
        self._rv = pods.metadata.resource_version
        self.cycles = 0
        """Watch requests ended so far."""
        self._thread = threading.Thread(target=self._run, name="pod-creates", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            w = watch.Watch()  # type: ignore[no-untyped-call]
            with contextlib.suppress(Exception):  # a broken watch resumes from the last version seen
                for event in w.stream(  # type: ignore[no-untyped-call]
                    self._core.list_namespaced_pod, NAMESPACE, resource_version=self._rv, timeout_seconds=2
                ):
                    if event["type"] == "ADDED":
                        self.added[event["object"].metadata.name] += 1
                    self._rv = event["object"].metadata.resource_version
                    if self._stop.is_set():
                        break
            self.cycles += 1

    def caught_up_from(self, cycles: int) -> bool:
        """Whether two watch requests began after ``cycles`` had ended: each resumes from the last version
        seen and ends only after its timeout, so the second has seen everything up to the call."""
        return self.cycles >= cycles + 2

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


@dataclass
class Stack(Processes):
    """The processes of one run."""

    nats: NatsServer


@contextlib.contextmanager
def fault_stack(workdir: Path, *, db_url: str | None = None) -> Iterator[Stack]:
    """Start every process (the status service on ``db_url``, SQLite by default); stop them all afterwards."""
    workdir.mkdir(parents=True, exist_ok=True)
    nats_server = NatsServer(workdir / "nats")
    nats_server.start()

    def services(kubeconfig: Path) -> dict[str, Service]:
        common = ["--nats-url", nats_server.url]
        db = db_url or f"sqlite+aiosqlite:///{workdir}/raybus.db"
        # a free history port at every start: the history API is not what this test reads
        status = Service("status", ["status", *common, "--db-url", db, "--http-port", "0"], workdir)
        kube = ["--kubeconfig", str(kubeconfig), "--use-kubernetes-proxy"]
        checks = ["--check-interval", str(CHECK_INTERVAL)]
        # A stable identity: restarted after a kill -9, it takes its Lease back at once (as a Pod keeps its name).
        watcher = Service("watcher", ["watcher", *common, *kube, "--worker-id", "watcher", *checks], workdir)
        found = {"status": status, "watcher": watcher}
        for worker in ("w1", "w2"):
            found[worker] = Service(worker, ["reconciler", *common, "--worker-id", worker], workdir)
        return found

    try:
        with running_processes(workdir, services) as procs:
            yield Stack(procs.workdir, procs.kube, procs.kubeconfig, procs.services, nats_server)
    finally:
        nats_server.stop()


@dataclass
class Figures:
    """What one run measured."""

    clusters: int
    scaled: int
    deleted: int
    creates: int
    minimum: int
    names: int
    created_twice: dict[str, int]
    left_for_deleted: int
    converge_after_kill: dict[str, float]
    converge_after_changes: float
    unhealthy: list[str]
    dead_letters: int

    @property
    def extra(self) -> int:
        return self.creates - self.minimum


def pods_by_cluster(api: client.ApiClient) -> Counter[str]:
    pods = client.CoreV1Api(api).list_namespaced_pod(NAMESPACE).items
    return Counter((meta(pod).labels or {}).get("ray.io/cluster", "") for pod in pods)


def _clusters(api: client.ApiClient) -> list[dict[str, Any]]:
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)
    return list(cast(dict[str, Any], listed)["items"])


def _states(api: client.ApiClient) -> dict[str, str]:
    return {c["metadata"]["name"]: (c.get("status") or {}).get("state", "") for c in _clusters(api)}


def converged(api: client.ApiClient, expected: dict[str, int]) -> bool:
    """Every named cluster ready with its expected Pods, every other cluster's Pods gone."""
    states, pods = _states(api), pods_by_cluster(api)
    if any(states.get(name) != "ready" or pods.get(name, 0) != count for name, count in expected.items()):
        return False
    return set(states) <= set(expected) and set(pods) <= set(expected)


async def drained(nats_url: str, partitions: int) -> bool:
    nc = await nats.connect(servers=nats_url.split(","))  # one URL, or a cluster's
    try:
        js = nc.jetstream()
        for stream, name in work_consumers(partitions):
            info = await js.consumer_info(stream, name)
            if info.num_pending or info.num_ack_pending:
                return False
        return True
    finally:
        await nc.close()


async def dead_letters(nats_url: str) -> int:
    nc = await nats.connect(servers=nats_url.split(","))  # one URL, or a cluster's
    try:
        info = await nc.jetstream().stream_info(subjects.DEADLETTER_STREAM)
        return int(info.state.messages)
    finally:
        await nc.close()


def run_faults(stack: Stack, *, clusters: int, scaled: int, deleted: int, timeout: float = 240) -> Figures:
    """The run described in the module docstring; returns its figures."""
    with stack.api() as api:
        return _run(stack, api, clusters=clusters, scaled=scaled, deleted=deleted, timeout=timeout)


def _run(stack: Stack, api: client.ApiClient, *, clusters: int, scaled: int, deleted: int, timeout: float) -> Figures:
    custom = client.CustomObjectsApi(api)
    creates = PodCreates(api)
    names = [f"fault-{i:04d}" for i in range(clusters)]
    bursts = [names[i :: len(KILLED)] for i in range(len(KILLED))]
    expected: dict[str, int] = {}
    converge_after_kill: dict[str, float] = {}
    try:
        for burst, victim in zip(bursts, KILLED, strict=True):
            for name in burst:
                custom.create_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, PLURAL, small_cluster(name, workers=WORKERS)
                )
                expected[name] = 1 + WORKERS
            _kill(stack, victim)
            converge_after_kill[victim] = wait(
                lambda: converged(api, expected), f"convergence after the kill of {victim}", timeout, stack
            )
        # every cluster reached its head and 3 workers: the minimum is fixed before anything changes
        minimum = sum(expected.values())
        changed_at = time.monotonic()
        for name in names[:scaled]:
            patch = {
                "spec": {"workerGroupSpecs": [{**small_cluster(name)["spec"]["workerGroupSpecs"][0], "replicas": 1}]}
            }
            custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name, patch)
            expected[name] = 2
        for name in names[-deleted:] if deleted else []:
            custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
            del expected[name]
        wait(lambda: converged(api, expected), "convergence after scale and delete", timeout, stack)
        # the watcher's unfinished batches come back after the ack wait: wait until every consumer drained
        wait(
            lambda: asyncio.run(drained(stack.nats.url, subjects.DEFAULT_PARTITIONS)),
            "every consumer drained",
            timeout,
            stack,
        )
        converge_after_changes = time.monotonic() - changed_at
        cycles = creates.cycles
        wait(lambda: creates.caught_up_from(cycles), "the Pod watch caught up", 60, stack)
        pods = pods_by_cluster(api)
        gone = set(names) - set(expected)
        return Figures(
            clusters=clusters,
            scaled=scaled,
            deleted=deleted,
            creates=sum(creates.added.values()),
            minimum=minimum,
            names=len(creates.added),
            created_twice={name: n for name, n in creates.added.items() if n > 1},
            left_for_deleted=sum(pods.get(name, 0) for name in gone),
            converge_after_kill=converge_after_kill,
            converge_after_changes=converge_after_changes,
            unhealthy=[s.name for s in stack.services.values() if not s.healthy()],
            dead_letters=asyncio.run(dead_letters(stack.nats.url)),
        )
    finally:
        creates.close()


def _kill(stack: Stack, victim: str) -> None:
    services = stack.services
    if victim == "nats-server":
        stack.nats.kill()
        stack.nats.start()
    elif victim == "reconciler":
        services.pop("w1").kill()
        third = services["w3"] = Service(
            "w3", ["reconciler", "--nats-url", stack.nats.url, "--worker-id", "w3"], stack.workdir
        )
        third.start()
    else:
        services[victim].kill()
        services[victim].start()


def describe(figures: Figures) -> dict[str, Any]:
    """The figures as plain data (what the bench prints)."""
    return {
        "clusters": figures.clusters,
        "scaled_to_1_worker": figures.scaled,
        "deleted": figures.deleted,
        "pod_creates": figures.creates,
        "minimum": figures.minimum,
        "extra_creates": figures.extra,
        "names_created_twice": len(figures.created_twice),
        "pods_left_for_deleted_clusters": figures.left_for_deleted,
        "converge_s_after_kill": {k: round(v, 1) for k, v in figures.converge_after_kill.items()},
        "converge_s_after_scale_and_delete_incl_drain": round(figures.converge_after_changes, 1),
        "unhealthy": figures.unhealthy,
        "dead_letters": figures.dead_letters,
    }


# --- the burst: every cluster at once, every component killed while they come up ----------------------

BURST_KILLS = (("reconciler", 0.1), ("watcher", 0.3), ("nats-server", 0.5), ("status", 0.7))
"""Each victim, and the share of the clusters that must have Pods before it is killed (then restarted)."""


@dataclass
class BurstFigures:
    """What one burst run measured."""

    clusters: int
    scaled: int
    deleted: int
    stuck: list[str]
    """Surviving clusters that had not converged within the bound, and why each."""
    converge_after_last_kill: float | None
    """Seconds from the last kill until every surviving cluster converged (None: not within the bound)."""
    creates: int
    created_twice: dict[str, int]
    left_for_deleted: int
    unhealthy: list[str]


def _have_pods(api: client.ApiClient, clusters: float) -> bool:
    """Whether at least ``clusters`` clusters have Pods."""
    return sum(1 for name, count in pods_by_cluster(api).items() if name and count) >= clusters


def _not_converged(api: client.ApiClient, expected: dict[str, int]) -> list[str]:
    """The clusters that differ from what is expected, each with why: every named cluster ``ready`` with
    ``readyWorkerReplicas`` = its expected workers = its running worker Pods and one running head; every
    other cluster gone with its Pods."""
    clusters = {c["metadata"]["name"]: c for c in _clusters(api)}
    heads: Counter[str] = Counter()
    workers: Counter[str] = Counter()
    for pod in client.CoreV1Api(api).list_namespaced_pod(NAMESPACE).items:
        labels = meta(pod).labels or {}
        cluster = labels.get("ray.io/cluster", "")
        running = pod.status is not None and pod.status.phase == "Running" and not meta(pod).deletion_timestamp
        if labels.get("ray.io/node-type") == "head":
            heads[cluster] += 1 if running else 100  # a head that is not running (or a second one) is wrong
        else:
            workers[cluster] += 1 if running else 100
    wrong: list[str] = []
    for name, want in expected.items():
        status = (clusters.get(name) or {}).get("status") or {}
        seen = (status.get("state"), status.get("readyWorkerReplicas", 0), heads[name], workers[name])
        if seen != ("ready", want, 1, want):
            wrong.append(f"{name}: state, readyWorkerReplicas, heads, workers = {seen}, want ready, {want}, 1, {want}")
    for name in (set(clusters) | set(heads) | set(workers)) - set(expected) - {""}:
        wrong.append(f"{name}: deleted, yet {heads[name] + workers[name]} Pods and the cluster {name in clusters}")
    return sorted(wrong)


def run_burst(stack: Stack, *, clusters: int, scaled: int, deleted: int, bound: float = 240) -> BurstFigures:
    """Create every cluster at once; kill -9 (and restart) each of :data:`BURST_KILLS` once its share of
    the clusters has Pods; right after the last kill scale ``scaled`` clusters to 1 worker and delete
    ``deleted``; then wait up to ``bound`` seconds for every surviving cluster to converge."""
    with stack.api() as api:
        return _burst(stack, api, clusters=clusters, scaled=scaled, deleted=deleted, bound=bound)


def _burst(
    stack: Stack, api: client.ApiClient, *, clusters: int, scaled: int, deleted: int, bound: float
) -> BurstFigures:
    custom = client.CustomObjectsApi(api)
    creates = PodCreates(api)
    names = [f"burst-{i:04d}" for i in range(clusters)]
    expected = dict.fromkeys(names, WORKERS)
    try:
        for name in names:
            custom.create_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, PLURAL, small_cluster(name, workers=WORKERS)
            )
        for victim, share in BURST_KILLS:
            wait(functools.partial(_have_pods, api, share * clusters), f"{share:.0%} of the clusters with Pods", bound)
            _kill(stack, victim)
        last_kill = time.monotonic()
        for name in names[:scaled]:
            group = {**small_cluster(name)["spec"]["workerGroupSpecs"][0], "replicas": 1}
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, PLURAL, name, {"spec": {"workerGroupSpecs": [group]}}
            )
            expected[name] = 1
        for name in names[-deleted:] if deleted else []:
            custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
            del expected[name]
        converged, stuck = _converge(stack, api, expected, deadline=last_kill + bound)
        converged = None if converged is None else converged - last_kill
        cycles = creates.cycles
        wait(lambda: creates.caught_up_from(cycles), "the Pod watch caught up", 60, stack)
        pods = pods_by_cluster(api)
        return BurstFigures(
            clusters=clusters,
            scaled=scaled,
            deleted=deleted,
            stuck=stuck,
            converge_after_last_kill=converged,
            creates=sum(creates.added.values()),
            created_twice={name: n for name, n in creates.added.items() if n > 1},
            left_for_deleted=sum(pods.get(name, 0) for name in set(names) - set(expected)),
            unhealthy=[s.name for s in stack.services.values() if not s.healthy()],
        )
    finally:
        creates.close()


def _converge(
    stack: Stack, api: client.ApiClient, expected: dict[str, int], *, deadline: float
) -> tuple[float | None, list[str]]:
    """Poll until every cluster is as expected (when, monotonic) or the deadline passed (what is not)."""
    wrong: list[str] = ["not read yet"]
    while True:
        stack.check()  # a service that died is a failure of its own, not a stuck cluster
        with contextlib.suppress(Exception):  # the API server is read again at the next poll
            wrong = _not_converged(api, expected)
        if not wrong:
            return time.monotonic(), []
        if time.monotonic() > deadline:
            return None, wrong
        time.sleep(0.5)


def describe_burst(figures: BurstFigures) -> dict[str, Any]:
    """A burst run's figures as plain data (what the bench prints)."""
    return {
        "clusters": figures.clusters,
        "scaled_to_1_worker": figures.scaled,
        "deleted": figures.deleted,
        "stuck_clusters": len(figures.stuck),
        "converge_s_after_last_kill": None
        if figures.converge_after_last_kill is None
        else round(figures.converge_after_last_kill, 1),
        "pod_creates": figures.creates,
        "names_created_twice": len(figures.created_twice),
        "pods_left_for_deleted_clusters": figures.left_for_deleted,
        "unhealthy": figures.unhealthy,
    }
