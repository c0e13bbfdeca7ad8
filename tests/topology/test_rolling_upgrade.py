"""A rolling upgrade from an earlier build of raybus to this one, during bursts of RayClusters.

Every role its own process on one nats-server and kubesim, as deploy/ runs them: watch, apply, probe,
reconciler, status (PostgreSQL). The stack starts as the earlier build (:data:`PREVIOUS`, run from its
own source tree on this interpreter) and each role is replaced as a Deployment's rolling update does:
the new replica starts, is ready, then the old one is stopped (SIGTERM: it drains and hands over),
while RayClusters keep being created. On the way the stack runs

- an earlier reconciler beside a newer applier (the appliers rolled first),
- a newer reconciler beside an earlier applier (the applier rolled back while the reconciler rolled),
- both builds of one role side by side, sharing its partitions,

and every cluster created meanwhile converges. Then some are deleted. No Pod name is created twice, no
Pod is left for a deleted cluster, every consumer drains (no stuck key) and nothing is dead-lettered:
each build reads what the other wrote (docs/evolution.md).
"""

from __future__ import annotations

import asyncio
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
    converged,
    dead_letters,
    pods_by_cluster,
)
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import (
    Processes,
    Service,
    imported_from,
    role_service,
    running_processes,
    source_tree,
    wait,
)
from tests.topology.nodeloss import wait_undrained

PREVIOUS = "c788b11bacb7fca2c2fd4249381fd2fe34119d07"
"""The build the upgrade starts from: main before the watcher's drift checks and before a denied command
made its key decided again (``REDECIDE``) — changes of behaviour on both sides of the bus within the
one-release window, with the same wire messages, streams, KV layout and migrations. Its runtime
dependencies are today's (pyproject's ``dependencies`` have not changed since), so it runs on this
virtualenv. A full clone of the repository has it; without it the test fails."""
PER_STEP = 4
"""RayClusters created right before each step of the upgrade."""


class Upgrade:
    """The stack in the middle of the upgrade: which replica of each role runs, of which build."""

    def __init__(self, stack: Processes, nats_url: str, db_url: str, previous: Path) -> None:
        self.stack = stack
        self.nats_url = nats_url
        self.db_url = db_url
        self.previous = previous
        self.started = 0

    def replica(self, role: str, build: str) -> Service:
        """A new replica of ``role`` of ``build`` (``old`` or ``new``), not started yet."""
        self.started += 1
        name = f"{role}-{build}-{self.started}"
        source = self.previous if build == "old" else None
        kubeconfig = self.stack.kubeconfig
        return role_service(
            role,
            name,
            self.stack.workdir,
            nats_url=self.nats_url,
            kubeconfig=kubeconfig,
            db_url=self.db_url,
            source=source,
        )

    def start(self, role: str, build: str) -> Service:
        """Start a replica and wait until it is ready."""
        service = self.replica(role, build)
        self.stack.services[service.name] = service
        service.start()
        wait(service.healthy, f"{service.name} ready", 120, self.stack)
        return service

    def stop(self, service: Service) -> None:
        """Stop a replica as a rolling update does: SIGTERM, a clean exit within its grace."""
        assert service.stop() == 0, service.log_tail()
        del self.stack.services[service.name]

    def roll(self, old: Service, role: str, build: str) -> Service:
        """Replace ``old`` by a replica of ``build``: the new one ready first, then the old one stopped."""
        new = self.start(role, build)
        self.stop(old)
        return new


def created(custom: client.CustomObjectsApi, expected: dict[str, int], step: str) -> None:
    """A burst of :data:`PER_STEP` RayClusters named after ``step``."""
    for index in range(PER_STEP):
        name = f"up-{step}-{index}"
        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, small_cluster(name, workers=WORKERS))
        expected[name] = 1 + WORKERS


@pytest.fixture
def previous_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:data:`PREVIOUS`'s source tree, which a process started from it imports (not this checkout)."""
    tree = source_tree(PREVIOUS, tmp_path_factory.mktemp("previous")).resolve()
    assert imported_from(tree, tree / "home") == tree
    return tree


@pytest.mark.timeout(1500)
def test_a_rolling_upgrade_from_the_previous_build_during_bursts_duplicates_nothing(
    tmp_path: Path, pg_url: str, previous_build: Path
) -> None:
    nats_server = NatsServer(tmp_path / "nats")
    nats_server.start()
    url = nats_server.url

    def old_stack(kubeconfig: Path) -> dict[str, Service]:
        roles = ("status", "watch", "probe", "reconciler", "apply")
        services = [
            role_service(
                role,
                f"{role}-old-0",
                tmp_path,
                nats_url=url,
                kubeconfig=kubeconfig,
                db_url=pg_url,
                source=previous_build,
            )
            for role in roles
        ]
        return {service.name: service for service in services}

    try:
        with running_processes(tmp_path, old_stack, one_at_a_time=True) as stack, stack.api() as api:
            custom = client.CustomObjectsApi(api)
            creates = PodCreates(api)
            up = Upgrade(stack, url, pg_url, previous_build)
            running = dict(stack.services)
            expected: dict[str, int] = {}
            try:
                created(custom, expected, "old")
                # The appliers roll first: the earlier reconciler's commands meet only the newer applier.
                apply = up.roll(running["apply-old-0"], "apply", "new")
                created(custom, expected, "old-reconciler-new-applier")
                wait(lambda: converged(api, expected), "convergence, old reconciler and new applier", 300, stack)
                # The reconciler rolls while the applier is rolled back: the newer reconciler's commands
                # meet only the earlier applier, whose results the newer reconciler reads.
                created(custom, expected, "rolling-reconciler")
                up.roll(running["reconciler-old-0"], "reconciler", "new")
                apply = up.roll(apply, "apply", "old")
                created(custom, expected, "new-reconciler-old-applier")
                wait(lambda: converged(api, expected), "convergence, new reconciler and old applier", 300, stack)
                # Both builds of one role share its partitions, then the rest of the stack rolls.
                created(custom, expected, "both-appliers")
                up.start("apply", "new")
                created(custom, expected, "both-appliers-running")
                up.stop(apply)
                for role in ("watch", "probe", "status"):
                    created(custom, expected, f"rolling-{role}")
                    up.roll(running[f"{role}-old-0"], role, "new")
                gone = sorted(expected)[: len(expected) // 4]
                for name in gone:
                    custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
                    del expected[name]
                wait(lambda: converged(api, expected), "every cluster converged", 600, stack)
                stuck = wait_undrained(stack, url)
                cycles = creates.cycles
                wait(lambda: creates.caught_up_from(cycles), "the Pod watch caught up", 60, stack)
                twice = {name: n for name, n in creates.added.items() if n > 1}
                left = sum(pods_by_cluster(api).get(name, 0) for name in gone)
                letters = asyncio.run(dead_letters(url))
                left_running = sorted(stack.services)
            finally:
                creates.close()
    finally:
        nats_server.stop()
    assert all("-new-" in name for name in left_running), left_running  # every role upgraded
    summary = {"created_twice": twice, "left_for_deleted": left, "undrained": stuck, "dead_letters": letters}
    assert twice == {} and left == 0 and stuck == [] and letters == 0, summary
