"""Readiness from progress: a stage holding work it does not finish is not ready; an idle one is."""

from __future__ import annotations

from services.runtime.health import Progress


def test_a_unit_of_work_running_too_long_fails_readiness_until_it_ends() -> None:
    now = [0.0]
    progress = Progress("applier", stall_after=60, clock=lambda: now[0])
    assert progress.stalled() is None
    with progress.working():
        now[0] = 60.0
        assert progress.stalled() is None
        with progress.working():
            now[0] = 61.0
            assert progress.stalled() == "applier: 2 unit(s) of work running, the oldest for 61s"
    assert progress.stalled() is None
