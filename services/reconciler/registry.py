"""Which pure reconcile function handles which kind."""

from __future__ import annotations

from schema.decision import ReconcileFn
from schema.keys import KeyKind


def default_reconcilers() -> dict[KeyKind, ReconcileFn]:
    """Every kind this build of raybus reconciles."""
    from services.reconciler import raycluster, raycronjob, rayjob, rayservice

    return {
        "RayCluster": raycluster.reconcile,
        "RayJob": rayjob.reconcile,
        "RayService": rayservice.reconcile,
        "RayCronJob": raycronjob.reconcile,
    }
