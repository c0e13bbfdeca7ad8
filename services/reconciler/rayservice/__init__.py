"""RayService: the pure reconcile of docs/behaviour.md#6 and #8. ``reconcile(snapshot, now, config) -> Decision``.

Modules, one job each (§ numbers are sections of docs/behaviour.md): ``names`` (names, keys, the
deterministic cluster name), ``model`` (decoded view), ``validation`` (§8), ``godur`` (Go durations),
``clusters`` (§6.3 and the spec-hash tests), ``kube_services`` (head/serve Services, endpoints),
``serve_observation`` (the prober's Serve observation), ``serve_config`` (Serve config submissions),
``incremental`` (§6.4 arithmetic), ``cleanup`` (§6.1 step 3, suspend deletions), ``suspend`` (§6.5),
``cluster_steps`` (§6.1 steps 9-11 and 14), ``reconcile_serve`` (step 12), ``routing`` (step 13),
``compute_status`` (§6.2), ``status_draft`` (write rule, conditions, transitions), ``passes`` (the
per-call accumulator) and ``reconcile`` (§6.1 order). The prober contract is ``schema.probes``.
"""

from services.reconciler.rayservice.reconcile import reconcile
from services.reconciler.rayservice.validation import validate

__all__ = ["reconcile", "validate"]
