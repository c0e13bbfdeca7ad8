"""A rolling restart of every role, two replicas each, one replica at a time, during bursts.

Every component its own process on one nats-server and kubesim, as deploy/ runs them: the watch side
(two replicas, one active by the Lease), the applier, the prober, the reconciler and the status service
(PostgreSQL, shared by its replicas), two of each. Each replica in turn is stopped (SIGTERM: it drains
and hands its partitions or its Lease over), started again and waited for, while RayClusters keep being
created. Then some are deleted. Every cluster converges, no Pod name is created twice, no Pod is left
for a deleted cluster, every consumer drains (no stuck key) and nothing is dead-lettered.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from schema import subjects
from schema.crd import write_crds
from tests.e2e.clusters import small_cluster
from tests.e2e.faults import (
    GROUP,
    NAMESPACE,
    PLURAL,
    VERSION,
    WORKERS,
    PodCreates,
    Service,
    Stack,
    converged,
    dead_letters,
    pods_by_cluster,
    wait,
)
from tests.e2e.pipeline import spawn_raybus
from tests.fixtures.nats import NatsServer, free_port
from tests.topology.nodeloss import undrained

PER_RESTART = 3
"""RayClusters created right before each replica's restart."""


@contextlib.contextmanager
def replicated_stack(workdir: Path, db_url: str) -> Iterator[Stack]:
    """Two replicas of every role; stopped afterwards."""
    nats_server = NatsServer(workdir / "nats")
    nats_server.start()
    crds = workdir / "crds"
    write_crds(crds)
    kubeconfig = workdir / "kubeconfig"
    kube_args = ["kubesim", "--port", str(free_port()), "--kubeconfig", str(kubeconfig), "--kubelet", "instant"]
    kube = spawn_raybus([*kube_args, "--crds", str(crds)], log_path=workdir / "kubesim.log", home=workdir / "home")
    services: dict[str, Service] = {}
    try:
        wait(kubeconfig.exists, "kubesim started", 60)
        common = ["--nats-url", nats_server.url]
        kube_flags = ["--kubeconfig", str(kubeconfig), "--use-kubernetes-proxy"]
        for replica in ("a", "b"):
            for role in ("watch", "apply", "probe"):
                name = f"{role}-{replica}"
                args = ["watcher", *common, *kube_flags, "--roles", role, "--worker-id", name]
                services[name] = Service(name, args, workdir)
            services[f"reconciler-{replica}"] = Service(
                f"reconciler-{replica}", ["reconciler", *common, "--worker-id", f"reconciler-{replica}"], workdir
            )
            services[f"status-{replica}"] = Service(
                f"status-{replica}", ["status", *common, "--db-url", db_url, "--http-port", "0"], workdir
            )
        stack = Stack(workdir, nats_server, kube, kubeconfig, services)
        for service in services.values():
            service.health_port = free_port()  # picked now: a port picked long before may be taken meanwhile
            service.start()
            wait(service.healthy, f"{service.name} ready", 120, stack)  # one at a time: migrations, topology
        yield stack
    finally:
        for service in services.values():
            service.stop()
        kube.terminate()
        try:
            kube.wait(30)
        except subprocess.TimeoutExpired:
            kube.kill()
        nats_server.stop()


@pytest.mark.timeout(1500)
def test_a_rolling_restart_of_every_role_during_bursts_duplicates_nothing(tmp_path: Path, pg_url: str) -> None:
    with replicated_stack(tmp_path, pg_url) as stack, stack.api() as api:
        custom = client.CustomObjectsApi(api)
        creates = PodCreates(api)
        expected: dict[str, int] = {}
        try:
            for turn, service in enumerate(list(stack.services.values())):
                for index in range(PER_RESTART):
                    name = f"roll-{turn:02d}-{index}"
                    body = small_cluster(name, workers=WORKERS)
                    custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)
                    expected[name] = 1 + WORKERS
                assert service.stop() == 0, service.log_tail()  # a clean stop, within its grace
                service.start()
                wait(service.healthy, f"{service.name} back", 120, stack)
            gone = sorted(expected)[: len(expected) // 4]
            for name in gone:
                custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
                del expected[name]
            wait(lambda: converged(api, expected), "every cluster converged", 600, stack)
            stuck = wait_undrained(stack)
            cycles = creates.cycles
            wait(lambda: creates.caught_up_from(cycles), "the Pod watch caught up", 60, stack)
            twice = {name: n for name, n in creates.added.items() if n > 1}
            left = sum(pods_by_cluster(api).get(name, 0) for name in gone)
            letters = asyncio.run(dead_letters(stack.nats.url))
        finally:
            creates.close()
    summary = {"created_twice": twice, "left_for_deleted": left, "undrained": stuck, "dead_letters": letters}
    assert twice == {} and left == 0 and stuck == [] and letters == 0, summary


def wait_undrained(stack: Stack) -> list[str]:
    """The consumers still undrained once they had time to drain (empty: no stuck key)."""
    with contextlib.suppress(AssertionError):
        wait(lambda: not asyncio.run(undrained(stack.nats.url, subjects.DEFAULT_PARTITIONS)), "drained", 300, stack)
    return asyncio.run(undrained(stack.nats.url, subjects.DEFAULT_PARTITIONS))
