"""The RayCluster controller as pure code: ``reconcile(snapshot, now, config) -> Decision``
(docs/behaviour.md#2 to #4 and #8).

Modules, one job each (§ numbers are sections of docs/behaviour.md): ``model`` (decoded view),
``validation``/``shape`` (§8), ``names`` (§2),
``rayparams`` (§3.2), ``pod_bodies``/``containers`` (§3), ``services``, ``ingress``, ``autoscaler_rbac``,
``auth``, ``gcsft`` (§3.8, §4.6), ``pod_census``/``reconcile_pods``/``multihost``/``pod_scaling`` (§4.2),
``status``/``resources``/``quantity`` (§4.5), ``events``, ``commands`` (ids, decision accumulator),
``spechash`` (§2.3) and ``reconcile`` (§4.1 order).

Builders other controllers reuse (RayJob, RayService): ``model.view_of``, ``pod_bodies.head_pod``,
``pod_bodies.worker_pod``, ``services.head_service`` (with ``name``/``owner_reference`` overrides),
``names.*``, ``rayparams.*``.
"""

from services.reconciler.raycluster.reconcile import reconcile

__all__ = ["reconcile"]
