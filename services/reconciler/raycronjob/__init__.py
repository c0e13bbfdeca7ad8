"""RayCronJob: the pure reconcile of SPEC §7 plus issue 9's extensions (concurrencyPolicy, history limits)."""

from services.reconciler.raycronjob.reconcile import reconcile
from services.reconciler.raycronjob.validation import validate_raycronjob

__all__ = ["reconcile", "validate_raycronjob"]
