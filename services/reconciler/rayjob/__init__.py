"""RayJob: the pure reconcile of docs/behaviour.md#5. ``reconcile(snapshot, now, config) -> Decision``."""

from services.reconciler.rayjob.reconcile import reconcile
from services.reconciler.rayjob.validation import validate_rayjob, validate_rayjob_spec

__all__ = ["reconcile", "validate_rayjob", "validate_rayjob_spec"]
