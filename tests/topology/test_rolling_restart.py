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
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.e2e.clusters import small_cluster
from tests.e2e.faults import (
    GROUP,
    NAMESPACE,
    PLURAL,
    VERSION,
    WORKERS,
    PodCreates,
    Stack,
    converged,
    dead_letters,
    pods_by_cluster,
)
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import Service, role_service, running_processes, wait
from tests.topology.nodeloss import wait_undrained

PER_RESTART = 3
"""RayClusters created right before each replica's restart."""


@contextlib.contextmanager
def replicated_stack(workdir: Path, db_url: str) -> Iterator[Stack]:
    """Two replicas of every role; stopped afterwards."""
    nats_server = NatsServer(workdir / "nats")
    nats_server.start()

    def services(kubeconfig: Path) -> dict[str, Service]:
        found = {}
        for replica in ("a", "b"):
            for role in ("watch", "apply", "probe", "reconciler", "status"):
                name = f"{role}-{replica}"
                found[name] = role_service(
                    role, name, workdir, nats_url=nats_server.url, kubeconfig=kubeconfig, db_url=db_url
                )
        return found

    try:
        # one at a time: migrations, topology
        with running_processes(workdir, services, one_at_a_time=True) as procs:
            yield Stack(
                workdir=procs.workdir,
                nats=nats_server,
                kube=procs.kube,
                kubeconfig=procs.kubeconfig,
                services=procs.services,
            )
    finally:
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
            stuck = wait_undrained(stack, stack.nats.url)
            cycles = creates.cycles
            wait(lambda: creates.caught_up_from(cycles), "the Pod watch caught up", 60, stack)
            twice = {name: n for name, n in creates.added.items() if n > 1}
            left = sum(pods_by_cluster(api).get(name, 0) for name in gone)
            letters = asyncio.run(dead_letters(stack.nats.url))
        finally:
            creates.close()
    summary = {"created_twice": twice, "left_for_deleted": left, "undrained": stuck, "dead_letters": letters}
    assert twice == {} and left == 0 and stuck == [] and letters == 0, summary
