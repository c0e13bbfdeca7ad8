"""The whole stack on a 3-node JetStream cluster, every component its own process (the topology tier and
``bench/fault_bench.py``'s node-loss runs share it).

Three nats-server nodes routed to each other, ``raybus topology --stream-replicas 3`` (what deploy/'s
admin Job runs), kubesim (kubelet ``instant``), ``raybus watcher``, two ``raybus reconciler`` workers and
``raybus status`` (SQLite), each service given every node's URL and started with
``--no-ensure-topology``, as in deploy/.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures.natscluster import NatsCluster
from tests.fixtures.processes import Processes, Service, running_processes, spawn_raybus


@dataclass
class ClusterStack(Processes):
    """The processes of one run on a NATS cluster."""

    cluster: NatsCluster


def run_topology(cluster: NatsCluster, workdir: Path) -> None:
    """``raybus topology --stream-replicas 3`` on the cluster, to its end.

    Raises:
        AssertionError: it failed, with its output.
    """
    log = workdir / "topology.log"
    proc = spawn_raybus(
        ["topology", "--nats-url", cluster.url, "--stream-replicas", "3"], log_path=log, home=workdir / "home"
    )
    if proc.wait(300) != 0:
        raise AssertionError(f"raybus topology failed:\n{log.read_text()}")


@contextlib.contextmanager
def cluster_stack(workdir: Path) -> Iterator[ClusterStack]:
    """Start every process; stop them all afterwards."""
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = NatsCluster(workdir / "nats")
    cluster.start()

    def services(kubeconfig: Path) -> dict[str, Service]:
        common = ["--nats-url", cluster.url, "--no-ensure-topology"]
        db = f"sqlite+aiosqlite:///{workdir}/raybus.db"
        kube = ["--kubeconfig", str(kubeconfig), "--use-kubernetes-proxy"]
        found = {
            "status": Service("status", ["status", *common, "--db-url", db, "--http-port", "0"], workdir),
            "watcher": Service("watcher", ["watcher", *common, *kube, "--worker-id", "watcher"], workdir),
        }
        for worker in ("w1", "w2"):
            found[worker] = Service(worker, ["reconciler", *common, "--worker-id", worker], workdir)
        return found

    try:
        cluster.wait_ready()
        run_topology(cluster, workdir)
        with running_processes(workdir, services) as procs:
            yield ClusterStack(procs.workdir, procs.kube, procs.kubeconfig, procs.services, cluster)
    finally:
        cluster.stop()
