"""The whole stack on a 3-node JetStream cluster with 3 replicas per stream (deploy/'s shape), losing one
node at a time during bursts of RayClusters: the meta leader, the leader of ``RAYBUS_EVENTS``, of
``RAYBUS_COMMANDS``, of the leases bucket (``tests/topology/nodeloss.py``).

Every cluster converges, no Pod name is created twice, no Pod is left for a deleted cluster, every
consumer drains (no stuck key), nothing is dead-lettered, and no service's lease group held no valid
partition for longer than the bus did not answer plus one lease TTL and one renewal: a correctness
bound (a member without partitions is work nobody does), not a speed figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.topology.nodeloss import QUORUM, describe, run_node_losses
from tests.topology.stack import cluster_stack


@pytest.mark.timeout(1800)
def test_losing_each_leader_during_bursts_converges_without_duplicates_or_long_lease_gaps(tmp_path: Path) -> None:
    with cluster_stack(tmp_path) as stack:
        figures = run_node_losses(stack, per_burst=10, deleted=8)
    summary = describe(figures)
    print(summary)  # the figures, for whoever runs it with -s
    assert figures.created_twice == {}, summary
    assert figures.left_for_deleted == 0, summary
    assert figures.dead_letters == 0, summary
    assert figures.undrained == [], summary
    assert figures.unhealthy == [], summary
    assert figures.longest_gap <= figures.gap_bound, summary


@pytest.mark.timeout(1800)
def test_losing_the_quorum_for_longer_than_a_lease_lives_costs_the_leases_for_a_bounded_time(
    tmp_path: Path,
) -> None:
    """Two nodes down for longer than a lease lives: every member loses its leases, stops its partitions
    at once and holds partitions again within one lease TTL and one renewal of the bus's return."""
    with cluster_stack(tmp_path) as stack:
        figures = run_node_losses(stack, per_burst=12, deleted=4, victims=(QUORUM,))
    summary = describe(figures)
    print(summary)
    assert figures.lease_gaps, summary  # the leases were lost: the path under test ran
    assert figures.created_twice == {}, summary
    assert figures.left_for_deleted == 0, summary
    assert figures.dead_letters == 0, summary
    assert figures.undrained == [], summary
    assert figures.unhealthy == [], summary
    assert figures.longest_gap <= figures.gap_bound, summary
