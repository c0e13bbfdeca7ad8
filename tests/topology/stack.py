"""The whole stack on a 3-node JetStream cluster, every component its own process (the topology tier and
``bench/fault_bench.py``'s node-loss runs share it).

Three nats-server nodes routed to each other, ``raybus topology --stream-replicas 3`` (what deploy/'s
admin Job runs), kubesim (kubelet ``instant``), ``raybus watcher``, two ``raybus reconciler`` workers and
``raybus status`` (SQLite), each service given every node's URL and started with
``--no-ensure-topology``, as in deploy/.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config

from schema.crd import write_crds
from tests.e2e.faults import Service, wait
from tests.e2e.pipeline import spawn_raybus
from tests.fixtures.nats import free_port
from tests.fixtures.natscluster import NatsCluster

LEASES_LOGGER = "services.runtime.leases"


@dataclass
class ClusterStack:
    """The processes of one run on a NATS cluster."""

    workdir: Path
    cluster: NatsCluster
    kube: subprocess.Popen[bytes]
    kubeconfig: Path
    services: dict[str, Service]

    def api(self) -> client.ApiClient:
        """A client on kubesim (close it: its connection pool holds sockets)."""
        return config.new_client_from_config(str(self.kubeconfig))

    def check(self) -> None:
        """Raise when a service that should run has died."""
        for service in self.services.values():
            if service.proc is not None and service.proc.poll() is not None:
                raise AssertionError(f"{service.name} exited with {service.proc.returncode}:\n{service.log_tail()}")

    def lease_gaps(self) -> dict[str, float]:
        """The longest time each service's lease group held no valid partition, from the services' logs
        (``<service>/<group>`` → seconds; a group that never went without is absent)."""
        gaps: dict[str, float] = {}
        for log in sorted(self.workdir.glob("*.log")):
            for line in log.read_text(errors="replace").splitlines():
                if '"gap_s"' not in line:
                    continue
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if record.get("logger") == LEASES_LOGGER:
                        name = f"{log.stem}/{record.get('lease_group', '')}"
                        gaps[name] = max(gaps.get(name, 0.0), float(record["gap_s"]))
        return gaps


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
    kube: subprocess.Popen[bytes] | None = None
    services: dict[str, Service] = {}
    try:
        cluster.wait_ready()
        run_topology(cluster, workdir)
        crds = workdir / "crds"
        write_crds(crds)
        kubeconfig = workdir / "kubeconfig"
        kube_args = ["kubesim", "--port", str(free_port()), "--kubeconfig", str(kubeconfig), "--kubelet", "instant"]
        kube = spawn_raybus([*kube_args, "--crds", str(crds)], log_path=workdir / "kubesim.log", home=workdir / "home")
        wait(kubeconfig.exists, "kubesim started", 60)
        common = ["--nats-url", cluster.url, "--no-ensure-topology"]
        db = f"sqlite+aiosqlite:///{workdir}/raybus.db"
        services["status"] = Service("status", ["status", *common, "--db-url", db, "--http-port", "0"], workdir)
        services["watcher"] = Service(
            "watcher",
            ["watcher", *common, "--kubeconfig", str(kubeconfig), "--use-kubernetes-proxy", "--worker-id", "watcher"],
            workdir,
        )
        for worker in ("w1", "w2"):
            services[worker] = Service(worker, ["reconciler", *common, "--worker-id", worker], workdir)
        for service in services.values():
            service.start()
        stack = ClusterStack(workdir, cluster, kube, kubeconfig, services)
        for service in services.values():
            wait(service.healthy, f"{service.name} ready", 120, stack)
        yield stack
    finally:
        for service in services.values():
            service.stop()
        if kube is not None:
            kube.terminate()
            try:
                kube.wait(30)
            except subprocess.TimeoutExpired:
                kube.kill()
        cluster.stop()
