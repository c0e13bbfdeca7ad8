"""The pure RayService reconcile (docs/behaviour.md#6, #8): ``reconcile(snapshot, now, config) -> Decision``.

Role: for key ``RayService/<ns>/<rs>``, in the order of docs/behaviour.md#6.1: managedBy → dangling-cluster cleanup →
deletion (finalizer) → finalizer → validation → suspend → terminal InitializingTimeout → clusters →
rollback decision → head-pod serve labels → Serve applications → Gateway/HTTPRoute → Services →
status (docs/behaviour.md#6.2) and KubeRay's conditional status write.

Entries read: ``RayService`` (the CR), ``RayCluster`` (labelled originated-from this RayService),
``Service`` (``<rs>-head-svc``, the serve Service, per-cluster ``<c>-serve-svc``), ``Pod`` (the
clusters' head pods), ``EndpointSlice`` (of the serve Services), ``Gateway``/``HTTPRoute``, and the
prober's observations ``obs-serve`` (entry name = cluster; the dashboard's declarative Serve
applications, or ``{"http_status": N, "error": ...}``) and ``obs-servehealth`` (entry name = head pod;
``{"healthy": bool, "http_status": N, "pod_uid": ...}``). See ``schema.probes`` for the prober
contract.

Time: KubeRay requeues every RayService every 2 s; raybus reacts to events (observations,
EndpointSlices, cluster and pod changes, its own writes) and asks for ``wake_at`` only at real
deadlines: deletion delays, the initializing timeout, incremental traffic steps, and 2 s after a Serve
config submission (to retry one the dashboard refused).

Deliberate differences from KubeRay (kept here so they are found):
- The serve-config cache and the cluster-deletion timers are durable annotations on the RayClusters
  (``raybus.io/serve-config-hash``, ``raybus.io/delete-after``) instead of operator memory; a restart
  neither resubmits configs nor restarts delays. The hash annotation is the PUT's ``record``, which the
  applier patches only once the dashboard accepted it, and a pass that submits asks to look again
  after 2 s (KubeRay's requeue), so a refused PUT is retried as in KubeRay. A cluster with no
  applications is always resubmitted.
- A missing head pod does not end the pass (KubeRay returns an error): the cluster is not ready, and
  the status computation, including the initializing timeout, still runs.
- Names ``<rs>-<5 chars>`` come from a hash of (uid, generation, the cluster replaced, collision count).
- A dashboard error observation ends the pass like KubeRay's error; a cluster not yet observed by the
  prober is simply not ready (no status churn, no poll).
- Gateway/HTTPRoute are updated when the desired spec is not contained in the live one (server-side
  defaults are tolerated; KubeRay's DeepEqual would rewrite them on every pass).
- A pass that records a step fact (traffic, promotion, deletion, ...) writes the status
  (``lastUpdateTime``) even when KubeRay's rule would not, so the fact reaches the history.
- The validation-failure status is written only when the condition changes, and its Warning Event is
  emitted only for a new message (KubeRay repeats both on every pass).

Invariants: pure and deterministic (same snapshot → same Decision); never raises on any input; at most
one PatchStatus per pass, carrying the RayService's resourceVersion and the pass's Transitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from schema.config import OperatorConfig
from schema.decision import Decision, Snapshot
from schema.messages import ObjectRef, PatchObject
from schema.ray import conventions
from schema.ray.conventions import API_VERSION
from schema.times import as_utc
from services.reconciler.common.patches import add_finalizer_patch, remove_finalizer_patch
from services.reconciler.common.prelude import owner_to_reconcile
from services.reconciler.rayservice.cleanup import cleanup_dangling
from services.reconciler.rayservice.cluster_steps import (
    Progress,
    decide_rollback,
    reconcile_clusters,
    reconcile_services,
    update_serve_labels,
)
from services.reconciler.rayservice.clusters import originated_clusters
from services.reconciler.rayservice.compute_status import compute_status
from services.reconciler.rayservice.model import read_model
from services.reconciler.rayservice.passes import Pass
from services.reconciler.rayservice.reconcile_serve import reconcile_serving
from services.reconciler.rayservice.routing import reconcile_gateway_objects
from services.reconciler.rayservice.status_draft import READY
from services.reconciler.rayservice.suspend import handle_suspend
from services.reconciler.rayservice.validation import validate


def reconcile(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    """Decide what one RayService (key ``RayService/<ns>/<rs>``) needs now (``ReconcileFn``)."""
    rayservice = owner_to_reconcile(snapshot, "6.1")
    if isinstance(rayservice, Decision):
        return rayservice
    now = as_utc(now)
    return _reconcile(snapshot, rayservice, now=now, config=config)


def _reconcile(snapshot: Snapshot, rayservice: Mapping[str, Any], *, now: datetime, config: OperatorConfig) -> Decision:
    model = read_model(rayservice)
    ref = ObjectRef(
        api_version=API_VERSION,
        kind="RayService",
        namespace=model.namespace or snapshot.key.namespace,
        name=model.name or snapshot.key.name,
        uid=model.uid,
    )
    pass_ = Pass(snapshot=snapshot, model=model, ref=ref, now=now, config=config)
    clusters = originated_clusters(snapshot, model.name)
    remaining = cleanup_dangling(pass_, clusters)
    if model.deleting:
        return _on_deletion(pass_, remaining=remaining)
    if conventions.FINALIZER_RAYSERVICE not in model.finalizers:
        pass_.commands.append(
            PatchObject(
                target=ref,
                patch=add_finalizer_patch(list(model.finalizers), conventions.FINALIZER_RAYSERVICE),
                patch_type="json",
                resource_version=model.resource_version,
            )
        )
        pass_.rule("6.1/add-finalizer")
        return pass_.decision()
    invalid = validate(model, config)
    if invalid is not None:
        _on_invalid(pass_, reason=invalid.reason, message=invalid.message)
        return _finish(pass_)
    if handle_suspend(pass_, clusters):
        return _finish(pass_)
    ready = pass_.status.condition(READY)
    if ready is not None and ready.get("status") == "False" and ready.get("reason") == "InitializingTimeout":
        pass_.rule("6.1/initializing-timeout-terminal")
        return _finish(pass_)
    progress = Progress()
    reconcile_clusters(pass_, progress, clusters=clusters)
    decide_rollback(pass_, progress)
    update_serve_labels(pass_, progress)
    reconcile_serving(pass_, progress)
    if pass_.halted:
        return pass_.decision()
    if pass_.incremental:
        reconcile_gateway_objects(pass_, progress)
        if pass_.halted:
            return pass_.decision()
    reconcile_services(pass_, progress)
    if pass_.halted:
        return pass_.decision()
    compute_status(pass_, progress)
    return _finish(pass_)


def _finish(pass_: Pass) -> Decision:
    """Append the pass's PatchStatus (when KubeRay's rule, or a step fact, says so) and decide."""
    patch = pass_.status.patch(
        target=pass_.ref,
        resource_version=pass_.model.resource_version,
        now=pass_.now,
        incremental_gate=pass_.config.gates.ray_service_incremental_upgrade,
    )
    if patch is not None:
        pass_.commands.append(patch)
        pass_.rule("6/status-write")
    return pass_.decision()


def _on_deletion(pass_: Pass, *, remaining: bool) -> Decision:
    """docs/behaviour.md#6.1 step 4: every cluster is being deleted; drop the finalizer once none is left."""
    if conventions.FINALIZER_RAYSERVICE not in pass_.model.finalizers:
        pass_.rule("6.1/deleting-no-finalizer")
        return pass_.decision()
    if remaining:
        pass_.rule("6.1/deleting-wait-clusters")
        return _finish(pass_)
    pass_.commands.append(
        PatchObject(
            target=pass_.ref,
            patch=remove_finalizer_patch(list(pass_.model.finalizers), conventions.FINALIZER_RAYSERVICE),
            patch_type="json",
            resource_version=pass_.model.resource_version,
        )
    )
    pass_.rule("6.1/deleting-remove-finalizer")
    return pass_.decision()


def _on_invalid(pass_: Pass, *, reason: str, message: str) -> None:
    """docs/behaviour.md#6.1 step 6: Warning Event, ``Ready=False/ValidationFailed`` with the error, no requeue."""
    ready = pass_.status.condition(READY)
    already = ready is not None and ready.get("reason") == "ValidationFailed" and ready.get("message") == message
    if not already:
        pass_.emit("Warning", reason=reason, message=f"{pass_.ref.namespace}/{pass_.ref.name}: {message}")
    observed = pass_.status.get("observedGeneration")
    pass_.status.set_condition(
        READY,
        status="False",
        reason="ValidationFailed",
        message=message,
        now=pass_.now,
        observed_generation=observed if isinstance(observed, int) and not isinstance(observed, bool) else 0,
    )
    pass_.rule("8/rayservice-invalid")
