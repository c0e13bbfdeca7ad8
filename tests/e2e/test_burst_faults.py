"""Level-triggered recovery (``tests/e2e/faults.py``'s burst run), CI-sized: every RayCluster created at
once, a reconciler, the watcher, nats-server and the status service each killed with SIGKILL (and
restarted) while the clusters come up, then scale-downs and deletions right after the last kill. Whatever
events were lost on the way, every surviving cluster converges (ready, ``readyWorkerReplicas`` matching
its running Pods), no Pod name is created twice and no Pod is left for a deleted cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.faults import describe_burst, fault_stack, run_burst


@pytest.mark.timeout(900)  # the bound after the last kill, and starting and stopping six processes
def test_every_surviving_cluster_converges_after_kill_9_of_every_component_during_a_burst(tmp_path: Path) -> None:
    with fault_stack(tmp_path) as stack:
        figures = run_burst(stack, clusters=40, scaled=10, deleted=8, bound=240)
    summary = describe_burst(figures)
    print(summary)  # the figures, for whoever runs it with -s
    assert figures.stuck == [], summary
    assert figures.created_twice == {}, summary
    assert figures.left_for_deleted == 0, summary
    assert figures.unhealthy == [], summary
