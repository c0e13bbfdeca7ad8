"""RayService: the pure reconcile of docs/behaviour.md#6 and #8. ``reconcile(snapshot, now, config) -> Decision``.

Modules, one job each (§ numbers are sections of docs/behaviour.md): ``names`` (names, keys, the
deterministic cluster name), ``model`` (decoded view), ``validation`` (§8), ``godur`` (Go durations),
``clusters`` (§6.3 and the spec-hash tests), ``services`` (head/serve Services, endpoints), ``serve``
(Serve observations and submissions), ``incremental`` (§6.4 arithmetic), ``cleanup`` (§6.1 step 3, suspend
deletions), ``suspend`` (§6.5), ``flow`` (§6.1 steps 9-11 and 14), ``serving`` (step 12), ``routing``
(step 13), ``outcome`` (§6.2), ``status`` (write rule, conditions, transitions), ``passes`` (the per-call
accumulator) and ``reconcile`` (§6.1 order). The prober contract is ``schema.probes``.
"""

from services.reconciler.rayservice.reconcile import reconcile
from services.reconciler.rayservice.validation import validate

__all__ = ["reconcile", "validate"]
