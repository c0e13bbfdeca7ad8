"""The prober's round starts with what reconciles wait for: targets never answered, or last answered with
an error (a job a reconcile submitted after a 404), then the rest, each group in its own order."""

from __future__ import annotations

from schema.decision import OBS_RAY_JOB
from schema.keys import ReconcileKey
from schema.probes import ProbeTarget, job_path
from services.edge.probe.probekinds import PROBE_KINDS
from services.edge.probe.prober import poll_order, state_key


def target(name: str) -> ProbeTarget:
    return ProbeTarget(
        key=ReconcileKey(kind="RayJob", namespace="ns", name=name),
        source="rayjob",
        entry_kind=OBS_RAY_JOB,
        entry_name=f"{name}-id",
        path=job_path(f"{name}-id"),
    )


def test_targets_that_wait_for_an_answer_come_first() -> None:
    steady, new, not_found, also_steady = (target(n) for n in ("steady", "new", "not-found", "also-steady"))
    pairs = [(PROBE_KINDS[0], t) for t in (steady, new, not_found, also_steady)]
    answered = {state_key(t): ("RUNNING",) for t in (steady, not_found, also_steady)}
    ordered = poll_order(pairs, answered, {state_key(not_found)})
    assert [t for _, t in ordered] == [new, not_found, steady, also_steady]


def test_a_round_with_nothing_waiting_keeps_its_order() -> None:
    pairs = [(PROBE_KINDS[0], target(n)) for n in ("a", "b", "c")]
    answered = {state_key(t): None for _, t in pairs}
    assert poll_order(pairs, answered, set()) == pairs
