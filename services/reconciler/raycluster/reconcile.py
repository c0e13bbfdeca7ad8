"""The RayCluster reconcile: the order of docs/behaviour.md#4.1, as a pure function of (snapshot, now, config).

Role: tie the modules together: managedBy → decode → validate (metadata, spec) → prelude checks →
GCS FT finalizer → autoscaler RBAC → Ingress → auth Secret → head / headless / serve Services → GCS PVC
→ pods → status → wake-up.

Invariants:
- Pure and deterministic : no clock, randomness, env or I/O; ``now`` is the only time.
- Never raises on any input: a spec that cannot be decoded or read becomes a Warning Event
  ``InvalidRayClusterSpec`` and an otherwise empty decision (docs/architecture.md#invariants, invariant 4).
- Validation failures create nothing and touch no status (no partial creation).
- ``wake_at`` = now + 2 s after an error or a status write, the GCS FT flow's 2 s / 10 s polls, else
  now + ``raycluster_default_requeue_seconds``; no wake-up after a validation failure (KubeRay: no
  requeue).

Deliberate differences from KubeRay (kept here so they are found):
- Scale expectations (docs/behaviour.md#4.3) are replaced by deterministic names and idempotent commands
  (``reconcile_pods``).
- A ServiceAccount named in the head template is never checked: user-created objects without the
  ``ray.io/cluster`` label are not in the snapshot, so raybus cannot tell whether it exists.
- The same holds for a bring-your-own rocksdb PVC (``storage.claimName``): not checked.
- OpenShift Routes, mTLS (cert-manager), NetworkPolicies, the history-server collector and batch
  schedulers are not implemented: mTLS/NetworkPolicy/history need alpha gates (off by default) and a
  cluster with them enabled gets a Warning Event instead of silent misbehaviour (mTLS), or nothing.
- ``ReplicaFailure`` is only ever removed, once the Pods are as desired: the failures it reports are
  API errors the applier sees (and marks with it), not reconcile.

Not here: the individual builders and planners (see the sibling modules).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

import msgspec

from schema.config import OperatorConfig
from schema.decision import Decision, Snapshot
from schema.messages import ObjectRef
from schema.ray import conventions
from services.reconciler.raycluster import (
    auth,
    autoscaler_rbac,
    events,
    gcsft,
    ingress,
    model,
    names,
    reconcile_pods,
    services,
    spechash,
    status,
    validation,
)
from services.reconciler.raycluster.commands import RAY_API_VERSION, Plan
from services.reconciler.raycluster.model import ClusterView
from services.reconciler.raycluster.pod_census import PodCensus, take_census

ERROR_REQUEUE_SECONDS: Final = 2.0


def reconcile(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    """Decide what to do for one RayCluster key (``ReconcileFn``)."""
    obj = snapshot.owner()
    if obj is None:
        return Decision()
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return _reconcile(snapshot, obj, now, config)


def _decision(plan: Plan, wake_at: datetime | None) -> Decision:
    return Decision(commands=tuple(plan.commands), wake_at=wake_at, rules=tuple(plan.rules))


def _reconcile(snapshot: Snapshot, obj: dict[str, Any], now: datetime, config: OperatorConfig) -> Decision:
    raw_spec = obj.get("spec")
    managed_by = raw_spec.get("managedBy") if isinstance(raw_spec, dict) else None
    if managed_by and managed_by != conventions.MANAGED_BY_KUBERAY:
        return Decision(rules=("4.1/managed-by-other",))
    raw_meta = obj.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    owner = ObjectRef(
        api_version=RAY_API_VERSION,
        kind="RayCluster",
        namespace=str(meta.get("namespace", snapshot.key.namespace)),
        name=str(meta.get("name", snapshot.key.name)),
        uid=str(meta.get("uid", "")),
    )
    plan = Plan(owner=owner)
    try:
        view = model.decode_view(obj)
    except msgspec.ValidationError as exc:
        events.invalid(plan, events.INVALID_SPEC, f"invalid RayCluster spec: {exc}")
        plan.rule("4.1/validate-spec-failed")
        return _decision(plan, None)
    if message := validation.validate_metadata(view):
        events.invalid(plan, events.INVALID_METADATA, message)
        plan.rule("4.1/validate-metadata-failed")
        return _decision(plan, None)
    if message := validation.validate_spec(view, config):
        events.invalid(plan, events.INVALID_SPEC, message)
        plan.rule("4.1/validate-spec-failed")
        return _decision(plan, None)
    if stop := _prelude(view, plan):
        return _decision(plan, now + timedelta(seconds=ERROR_REQUEUE_SECONDS) if stop == "requeue" else None)
    census = take_census(view.name, snapshot.of_kind("Pod"))
    jobs = snapshot.of_kind("Job") if view.deletion_timestamp else []  # only the deletion flow reads Jobs
    if gcsft.handle_finalizer(view, config, census=census, jobs=jobs, now=now, plan=plan):
        wake = now + timedelta(seconds=plan.requeue_after) if plan.requeue_after is not None else None
        return _decision(plan, wake)
    service_list = snapshot.of_kind("Service")
    hash_cache: list[str] = []

    def spec_hash() -> str:
        if not hash_cache:
            hash_cache.append(spechash.spec_hash(view.raw_spec))
        return hash_cache[0]

    if _children(view, config, snapshot, service_list, plan):
        reconcile_pods.plan_pods(view, config, census=census, plan=plan, spec_hash=spec_hash, now=now)
    changed = _write_status(view, config, census=census, service_list=service_list, now=now, plan=plan)
    if plan.error or changed:
        plan.requeue(ERROR_REQUEUE_SECONDS)
    else:
        plan.requeue(config.switches.raycluster_default_requeue_seconds)
    assert plan.requeue_after is not None
    return _decision(plan, now + timedelta(seconds=plan.requeue_after))


def _prelude(view: ClusterView, plan: Plan) -> str:
    """docs/behaviour.md#4.1 steps 6-9. Returns "" to go on, "stop" or "requeue" to end the pass."""
    spec = view.spec
    if model.autoscaling_enabled(spec) and not model.autoscaler_v2(spec):
        for group in spec.worker_group_specs or ():
            policy = (group.template.get("spec") or {}).get("restartPolicy") or ""
            if policy not in ("", "Never"):
                events.invalid(
                    plan,
                    events.INVALID_SPEC,
                    f"worker group {group.group_name} has restartPolicy {policy}; the Ray autoscaler v1 expects "
                    "Never or unset (a restarted worker container is not known to the autoscaler)",
                )
                plan.rule("4.1/autoscaler-v1-restart-policy")
    if spec.tls_options is not None and spec.tls_options.enabled:
        events.invalid(plan, events.INVALID_SPEC, "tlsOptions (mTLS through cert-manager) is not supported by raybus")
        plan.rule("4.1/mtls-unsupported")
        return "stop"
    strategy = spec.upgrade_strategy.type if spec.upgrade_strategy is not None else None
    if strategy is not None and model.creator_crd(view) != "RayCluster":
        events.invalid(
            plan,
            events.INVALID_SPEC,
            f"upgradeStrategy cannot be set on a RayCluster created by a {model.creator_crd(view)}",
        )
        plan.rule("4.1/upgrade-strategy-invalid")
        return "stop"
    if model.condition_true(view, status.SUSPENDING) and model.condition_true(view, status.SUSPENDED):
        events.invalid(
            plan,
            events.INVALID_STATUS,
            "the RayClusterSuspending and RayClusterSuspended conditions cannot both be True",
        )
        plan.fail("invalid RayCluster status", "4.1/validate-status-failed")
        return "requeue"
    return ""


def _children(
    view: ClusterView, config: OperatorConfig, snapshot: Snapshot, service_list: list[dict[str, Any]], plan: Plan
) -> bool:
    """docs/behaviour.md#4.1 step 11 up to the pods. Returns False at the first error."""
    spec = view.spec
    if model.autoscaling_enabled(spec):
        user_sa = autoscaler_rbac.user_service_account(view)
        rbac = (
            ("ServiceAccount", autoscaler_rbac.service_account(view), events.CREATED_SERVICE_ACCOUNT, not user_sa),
            ("Role", autoscaler_rbac.role(view), events.CREATED_ROLE, True),
            ("RoleBinding", autoscaler_rbac.role_binding(view), events.CREATED_ROLE_BINDING, True),
        )
        for kind, body, reason, wanted in rbac:
            name = body["metadata"]["name"]
            if wanted and snapshot.get(kind, name) is None:
                plan.create(kind, body)
                events.created_object(plan, reason, kind, name)
                plan.rule(f"4.1/create-autoscaler-{kind.lower()}")
    if spec.head_group_spec.enable_ingress:
        _ingress(view, snapshot, plan)
    if auth.needs_auth_secret(view):
        name = names.auth_secret_name(view.name)
        if snapshot.get("Secret", name) is None:
            plan.create("Secret", auth.auth_secret(view))
            plan.rule("4.1/create-auth-secret")
    head_services = services.find_head_services(view, service_list)
    if len(head_services) > 1:
        plan.fail(
            f"{len(head_services)} head Services found for RayCluster {view.namespace}/{view.name}",
            "4.1/multiple-head-services",
        )
        return False
    if not head_services:
        body = services.head_service(view, config)
        if not body["spec"].get("ports"):
            plan.fail("the head Service has no ports", "4.1/head-service-no-ports")
            return False
        plan.create("Service", body)
        events.created_object(plan, events.CREATED_SERVICE, "Service", body["metadata"]["name"])
        plan.rule("4.1/create-head-service")
    if any(g.num_of_hosts > 1 for g in spec.worker_group_specs or ()) and not services.find_headless_services(
        view, service_list
    ):
        body = services.headless_service(view)
        plan.create("Service", body)
        events.created_object(plan, events.CREATED_SERVICE, "Service", body["metadata"]["name"])
        plan.rule("4.1/create-headless-service")
    if model.serve_service_enabled(view) and snapshot.get("Service", names.serve_service_name(view.name)) is None:
        body = services.serve_service(view)
        if not body["spec"]["ports"]:
            plan.fail(
                "the serve Service has no serve ports (a head port named serve or serve-*)",
                "4.1/serve-service-no-ports",
            )
            return False
        plan.create("Service", body)
        events.created_object(plan, events.CREATED_SERVICE, "Service", body["metadata"]["name"])
        plan.rule("4.1/create-serve-service")
    pvc = gcsft.gcs_pvc(view)
    if pvc is not None and snapshot.get("PersistentVolumeClaim", pvc["metadata"]["name"]) is None:
        plan.create("PersistentVolumeClaim", pvc)
        plan.rule("4.1/create-gcs-pvc")
    return True


def _ingress(view: ClusterView, snapshot: Snapshot, plan: Plan) -> None:
    name = names.ingress_name(view.name)
    action, body = ingress.plan_ingress(view, snapshot.get("Ingress", name))
    if action == "create":
        plan.create("Ingress", body)
        events.created_object(plan, events.CREATED_INGRESS, "Ingress", name)
        plan.rule("4.1/create-ingress")
    elif action == "update":
        plan.patch(plan.ref("Ingress", name), body)
        plan.event("Normal", events.UPDATED_INGRESS, f"Updated Ingress {view.namespace}/{name}")
        plan.rule("4.1/update-ingress")
    elif action == "foreign":
        plan.event(
            "Warning",
            events.FAILED_TO_CREATE_INGRESS,
            f"Ingress {view.namespace}/{name} already exists and is not owned by RayCluster {view.name}",
        )
        plan.rule("4.1/ingress-not-owned")


def _write_status(
    view: ClusterView,
    config: OperatorConfig,
    *,
    census: PodCensus,
    service_list: list[dict[str, Any]],
    now: datetime,
    plan: Plan,
) -> bool:
    """docs/behaviour.md#4.1 step 12. Returns True when the status was written."""
    try:
        new = status.compute_status(view, config, census=census, services=service_list, error=plan.error, now=now)
    except status.StatusError as exc:
        plan.fail(str(exc), "4.5/status-not-computed")
        return False
    old = view.status
    if not status.status_changed(old, new):
        return False
    # The old status as we decoded it: fields raybus does not model are left alone by the patch.
    patch = status.merge_patch(status.status_builtins(old), status.status_builtins(new))
    plan.patch_status(
        patch, resource_version=view.resource_version, transitions=status.transitions_of(view, old, new, now=now)
    )
    if old.state != new.state:
        plan.rule(f"4.5/state:{old.state or 'none'}->{new.state}")
    plan.rule("4.5/write-status")
    return True
