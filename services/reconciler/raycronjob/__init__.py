"""RayCronJob: the pure reconcile of docs/behaviour.md#7 plus raybus's extensions (concurrencyPolicy,
history limits: docs/differences.md#raycronjob)."""

from services.reconciler.raycronjob.reconcile import reconcile
from services.reconciler.raycronjob.validation import validate_raycronjob

__all__ = ["reconcile", "validate_raycronjob"]
