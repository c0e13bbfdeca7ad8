"""The fault-injection run (``tests/e2e/faults.py``), CI-sized: kill -9 of a reconciler, the watcher,
nats-server and the status service during bursts, then scale-downs and deletions while the killed
watcher's batches wait for redelivery. Only decisions that still hold are applied: no Pod comes back for
a deleted cluster, no Pod name is created twice, Pod creates stay within 2 % of the minimum, and every
component that runs at the end is healthy."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.faults import describe, fault_stack, run_faults


def test_kill_9_of_every_component_during_bursts_applies_only_decisions_that_still_hold(tmp_path: Path) -> None:
    with fault_stack(tmp_path) as stack:
        figures = run_faults(stack, clusters=60, scaled=20, deleted=10)
    summary = describe(figures)
    print(summary)  # the figures, for whoever runs it with -s
    assert figures.left_for_deleted == 0, summary
    assert figures.created_twice == {}, summary
    assert figures.creates <= figures.minimum * 1.02, summary
    assert figures.unhealthy == [], summary
    assert figures.dead_letters == 0, summary
