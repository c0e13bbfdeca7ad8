"""Node loss on a 3-node JetStream cluster during bursts of RayClusters (the topology tier and
``bench/fault_bench.py --node-loss`` share it).

For each victim in turn — the JetStream meta leader, the leader of ``RAYBUS_EVENTS``, of
``RAYBUS_COMMANDS``, of the leases bucket — a burst of RayClusters (1 head, 3 workers) is created and
right after it the node leading that group is killed with SIGKILL (``QUORUM``: that of the leases
bucket and one more, both restarted after a lease TTL and 5 s, so every lease expires). The run notes
when the bus answers again (the meta group and every stream have a leader among the live nodes), waits
until every cluster created so far is ready, restarts the node on its store and waits until it caught
up. Then some clusters are deleted, and the run waits until everything converged and every consumer
drained.

Figures: seconds from each kill until the bus answered and until every cluster converged, the longest
time each service's lease group held no valid partition (from the services' logs), Pod names created
twice, Pods left for deleted clusters, dead letters, consumers left undrained (stuck keys), services
unhealthy at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import nats
from kubernetes import client

from schema import subjects
from services.runtime.settings import PartitionSettings
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
    drained,
    pods_by_cluster,
)
from tests.fixtures.natscluster import LEASES_STREAM, NatsCluster, Node
from tests.fixtures.processes import Checked, wait
from tests.helpers import work_consumers
from tests.topology.stack import ClusterStack

META = "meta"
QUORUM = "quorum"
"""Two of the three nodes at once, the leases bucket's leader among them, down for ``QUORUM_OUTAGE``."""
QUORUM_OUTAGE = PartitionSettings().lease_ttl + 5.0
"""Seconds the quorum stays lost: longer than a lease lives, so every member loses its leases."""
VICTIMS = (META, subjects.EVENTS_STREAM, subjects.COMMANDS_STREAM, LEASES_STREAM)
"""What each burst is followed by a kill -9 of the leader of, in order."""
STREAMS = [subjects.EVENTS_STREAM, subjects.COMMANDS_STREAM, subjects.RESULTS_STREAM, LEASES_STREAM]
"""The replicated groups whose leaders the services need."""


@dataclass
class NodeLossFigures:
    """What one run measured."""

    clusters: int
    deleted: int
    killed: dict[str, str]
    """Victim → the node that led it when killed."""
    bus_back_s: dict[str, float]
    converge_s: dict[str, float]
    lease_gaps: dict[str, float]
    created_twice: dict[str, int]
    left_for_deleted: int
    dead_letters: int
    undrained: list[str]
    """Consumers with messages pending or unacknowledged at the end: keys stuck behind them."""
    unhealthy: list[str]

    @property
    def longest_gap(self) -> float:
        return max(self.lease_gaps.values(), default=0.0)

    @property
    def gap_bound(self) -> float:
        """What the longest gap may be: the longest time the bus did not answer, then one lease TTL and one
        renewal (the services run with the default lease settings)."""
        leases = PartitionSettings()
        return max(self.bus_back_s.values(), default=0.0) + leases.lease_ttl + leases.renew_interval


def leader_of(cluster: NatsCluster, victim: str) -> Node | None:
    """The node leading ``victim`` (the meta group, or a stream; the leases bucket for the quorum loss)."""
    if victim == META:
        return cluster.meta_leader()
    return cluster.stream_leader(LEASES_STREAM if victim == QUORUM else victim)


def bus_answers(cluster: NatsCluster) -> bool:
    """The meta group and every stream the services use have a leader among the live nodes."""
    return cluster.meta_leader() is not None and all(cluster.stream_leader(s) is not None for s in STREAMS)


async def undrained(nats_url: str, partitions: int) -> list[str]:
    """The durable consumers with messages pending or unacknowledged."""
    nc = await nats.connect(servers=nats_url.split(","))
    try:
        js = nc.jetstream()
        found = []
        for stream, name in work_consumers(partitions):
            info = await js.consumer_info(stream, name)
            if info.num_pending or info.num_ack_pending:
                found.append(f"{stream}/{name}")
        return found
    finally:
        await nc.close()


def wait_undrained(stack: Checked, nats_url: str) -> list[str]:
    """The consumers still undrained once they had time to drain (empty: no stuck key)."""
    with contextlib.suppress(AssertionError):
        wait(lambda: not asyncio.run(undrained(nats_url, subjects.DEFAULT_PARTITIONS)), "drained", 300, stack)
    return asyncio.run(undrained(nats_url, subjects.DEFAULT_PARTITIONS))


def run_node_losses(
    stack: ClusterStack, *, per_burst: int, deleted: int, victims: tuple[str, ...] = VICTIMS, timeout: float = 300
) -> NodeLossFigures:
    """The run described in the module docstring; returns its figures."""
    with stack.api() as api:
        return _run(stack, api, per_burst=per_burst, deleted=deleted, victims=victims, timeout=timeout)


def _run(
    stack: ClusterStack,
    api: client.ApiClient,
    *,
    per_burst: int,
    deleted: int,
    victims: tuple[str, ...],
    timeout: float,
) -> NodeLossFigures:
    custom = client.CustomObjectsApi(api)
    creates = PodCreates(api)
    cluster = stack.cluster
    expected: dict[str, int] = {}
    killed: dict[str, str] = {}
    bus_back: dict[str, float] = {}
    converge: dict[str, float] = {}
    names: list[str] = []
    try:
        for burst, victim in enumerate(victims):
            wait(lambda: cluster.caught_up(STREAMS), "every stream replica current", timeout, stack)
            node = leader_of(cluster, victim)
            assert node is not None, f"no leader of {victim}"
            for index in range(per_burst):
                name = f"loss-{burst}-{index:03d}"
                custom.create_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, PLURAL, small_cluster(name, workers=WORKERS)
                )
                expected[name] = 1 + WORKERS
                names.append(name)
            killed_at = time.monotonic()
            down = [node]
            if victim == QUORUM:  # the leases leader and one more node: no group has a quorum left
                down.append(next(other for other in cluster.nodes if other is not node))
            for each in down:
                cluster.kill(each)
            killed[victim] = ",".join(each.name for each in down)
            if victim == QUORUM:
                time.sleep(QUORUM_OUTAGE)  # the outage itself: the leases must expire meanwhile
                for each in down:
                    cluster.restart(each)
            wait(lambda: bus_answers(cluster), f"the bus answers after {victim}'s loss", timeout)
            bus_back[victim] = time.monotonic() - killed_at
            wait(lambda: converged(api, expected), f"convergence after the loss of {victim}", timeout, stack)
            converge[victim] = time.monotonic() - killed_at
            if victim != QUORUM:
                cluster.restart(node)
        for name in names[-deleted:] if deleted else []:
            custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
            del expected[name]
        wait(lambda: converged(api, expected), "convergence after the deletions", timeout, stack)
        with contextlib.suppress(AssertionError):  # what stays undrained is counted below
            wait(
                lambda: asyncio.run(drained(cluster.url, subjects.DEFAULT_PARTITIONS)),
                "every consumer drained",
                timeout,
                stack,
            )
        cycles = creates.cycles
        wait(lambda: creates.caught_up_from(cycles), "the Pod watch caught up", 60, stack)
        pods = pods_by_cluster(api)
        gone = set(names) - set(expected)
        return NodeLossFigures(
            clusters=len(names),
            deleted=deleted,
            killed=killed,
            bus_back_s=bus_back,
            converge_s=converge,
            lease_gaps=stack.lease_gaps(),
            created_twice={name: n for name, n in creates.added.items() if n > 1},
            left_for_deleted=sum(pods.get(name, 0) for name in gone),
            dead_letters=asyncio.run(dead_letters(cluster.url)),
            undrained=asyncio.run(undrained(cluster.url, subjects.DEFAULT_PARTITIONS)),
            unhealthy=[s.name for s in stack.services.values() if not s.healthy()],
        )
    finally:
        creates.close()


def describe(figures: NodeLossFigures) -> dict[str, Any]:
    """The figures as plain data (what the bench prints)."""
    return {
        "clusters": figures.clusters,
        "deleted": figures.deleted,
        "killed_leader_of": figures.killed,
        "bus_answers_s_after_kill": {k: round(v, 1) for k, v in figures.bus_back_s.items()},
        "converge_s_after_kill": {k: round(v, 1) for k, v in figures.converge_s.items()},
        "longest_lease_gap_s": {k: round(v, 1) for k, v in figures.lease_gaps.items()},
        "lease_gap_bound_s": round(figures.gap_bound, 1),
        "names_created_twice": len(figures.created_twice),
        "pods_left_for_deleted_clusters": figures.left_for_deleted,
        "dead_letters": figures.dead_letters,
        "undrained_consumers": figures.undrained,
        "unhealthy": figures.unhealthy,
    }
