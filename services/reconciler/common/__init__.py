"""Code the kind reconcilers share, pure like them: no I/O, no clock, no randomness.

Modules: ``memo`` (results of pure functions remembered by their arguments' identity), ``names`` (the
derived five-character suffix), ``owners`` (controller owner references), ``patches`` (merge diffs,
omitempty bodies, finalizer patches), ``transitions`` (steps of a pass and the Transitions they become),
``validation`` (DNS-1035 names). KubeRay's label, annotation and port names are ``schema.ray.conventions``;
times are ``schema.times``; the prober contract is ``schema.probes``.

A kind imports only this package and what it builds or validates of another kind: RayJob and RayService
build RayClusters (``raycluster.model``, ``raycluster.services``, ``raycluster.validation``), and a
RayCronJob's template is a RayJob spec (``rayjob.validation``), as in KubeRay. A module lands here when
two kinds need the same logic, not when two kinds merely look alike.
"""
