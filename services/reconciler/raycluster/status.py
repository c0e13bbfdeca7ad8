"""calculateStatus (docs/behaviour.md#4.5) and the status write rule (#1.2).

Role: compute the RayCluster's next status from the snapshot (pods, head Service) and the outcome of
this pass, decide whether it must be written, and produce the merge patch plus the transitions it
confirms (``state`` and each condition whose status changed).

Invariants:
- ``state=ready`` is sticky: only ``suspended`` replaces it.
- Conditions follow ``meta.SetStatusCondition``: ``lastTransitionTime`` moves only when the status
  string changes; reason/message are updated in place; new conditions are appended.
- The status is written only when state, reason, the five replica counts, endpoints, head or conditions
  changed; ``lastUpdateTime`` (= ``now``) and ``observedGeneration`` ride along but never trigger a write.
- The patch is a JSON merge patch of the whole status: keys the new status lacks are sent as ``null``.

Not here: the per-field resource arithmetic (``resources``), pod facts (``pod_census``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

import msgspec

from schema.config import OperatorConfig
from schema.messages import Transition
from schema.ray import Condition, HeadInfo, RayClusterStatus
from schema.ray.common import ConditionStatus
from schema.times import format_time
from services.reconciler.raycluster.model import ClusterView, desired_pods
from services.reconciler.raycluster.pod_census import PodCensus, PodInfo
from services.reconciler.raycluster.resources import desired_resources
from services.reconciler.raycluster.services import find_head_services

MAX_INT32: Final = 2_147_483_647

HEAD_POD_READY: Final = "HeadPodReady"
PROVISIONED: Final = "RayClusterProvisioned"
SUSPENDING: Final = "RayClusterSuspending"
SUSPENDED: Final = "RayClusterSuspended"
REPLICA_FAILURE: Final = "ReplicaFailure"


class StatusError(Exception):
    """calculateStatus failed (missing/duplicate head Service, several head pods): nothing is written."""


def _status_value(value: str) -> ConditionStatus:
    if value == "True":
        return "True"
    if value == "False":
        return "False"
    return "Unknown"


def set_condition(conditions: list[Condition], *, type_: str, status: str, reason: str, message: str, now: str) -> None:
    """``meta.SetStatusCondition`` on a list of typed conditions (replaced in place, order kept)."""
    for i, existing in enumerate(conditions):
        if existing.type != type_:
            continue
        if existing.status == status and existing.reason == reason and existing.message == message:
            if existing.observed_generation is not None:
                conditions[i] = msgspec.structs.replace(existing, observed_generation=None)
            return
        conditions[i] = Condition(
            type=type_,
            status=_status_value(status),
            reason=reason,
            message=message,
            last_transition_time=now if existing.status != status else existing.last_transition_time,
        )
        return
    conditions.append(
        Condition(type=type_, status=_status_value(status), reason=reason, message=message, last_transition_time=now)
    )


def _find(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def _is_true(conditions: list[Condition], type_: str) -> bool:
    found = _find(conditions, type_)
    return found is not None and found.status == "True"


def head_pod_ready_condition(head: PodInfo | None) -> tuple[str, str, str]:
    """(status, reason, message) of ``HeadPodReady`` from the head pod's PodReady condition."""
    if head is None:
        return "False", "HeadPodNotFound", "Head Pod not found"
    status = head.obj.get("status") or {}
    for condition in status.get("conditions") or []:
        if not isinstance(condition, dict) or condition.get("type") != "Ready":
            continue
        value = str(condition.get("status") or "Unknown")
        message = str(condition.get("message") or "")
        reason = str(condition.get("reason") or "")
        if value == "True" and not reason:
            reason = "HeadPodRunningAndReady"
        if reason == "ContainersNotReady":
            for container in status.get("containerStatuses") or []:
                state = container.get("state") if isinstance(container, dict) else None
                if not isinstance(state, dict):
                    continue
                detail = state.get("waiting") or state.get("terminated")
                if isinstance(detail, dict) and detail.get("reason"):
                    reason = str(detail["reason"])
                    message = f"{message}; {container.get('name')}: {detail.get('message') or ''}".strip("; ")
                    break
        return value, reason or "Unknown", message
    return "False", "Unknown", ""


def _endpoints(service: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for port in (service.get("spec") or {}).get("ports") or []:
        if not isinstance(port, dict) or not port.get("name"):
            continue
        node_port = port.get("nodePort")
        target = port.get("targetPort")
        if isinstance(node_port, int) and node_port != 0:
            out[str(port["name"])] = str(node_port)
        elif (isinstance(target, int) and target != 0) or (isinstance(target, str) and target):
            out[str(port["name"])] = str(target)
    return out


def compute_status(
    view: ClusterView,
    config: OperatorConfig,
    *,
    census: PodCensus,
    services: list[dict[str, Any]],
    error: str,
    now: datetime,
) -> RayClusterStatus:
    """docs/behaviour.md#4.5 on a copy of the current status.

    Raises:
        StatusError: the head Service is missing or duplicated, or there are several head pods.
    """
    old = view.status
    stamp = format_time(now)
    spec = view.spec
    gate = config.gates.ray_cluster_status_conditions
    conditions = list(old.conditions or ())
    groups = spec.worker_group_specs or ()
    active = [g for g in groups if not g.suspend]
    desired = sum(desired_pods(g) for g in groups)
    if gate and not error and (len(census.pods) == desired + 1 or spec.suspend):
        # The applier sets ReplicaFailure when a Pod create or delete failed after its retries; reconcile
        # cannot see that failure, only its end: the Pods are as desired (or being suspended away).
        conditions = [c for c in conditions if c.type != REPLICA_FAILURE]
    minimum = sum(g.min_replicas * max(g.num_of_hosts, 1) for g in active)
    maximum = min(sum(g.max_replicas * max(g.num_of_hosts, 1) for g in active), MAX_INT32)
    state, reason = old.state, old.reason
    if not error and len(census.pods) == desired + 1 and census.all_running_and_ready:
        state, reason = "ready", ""
    if len(census.heads) > 1:
        raise StatusError(f"{len(census.heads)} head Pods found for RayCluster {view.namespace}/{view.name}")
    head = census.heads[0] if census.heads else None
    if gate:
        value, why, message = head_pod_ready_condition(head)
        set_condition(conditions, type_=HEAD_POD_READY, status=value, reason=why, message=message, now=stamp)
        suspended = _is_true(conditions, SUSPENDED)
        suspending = _is_true(conditions, SUSPENDING)
        if not _is_true(conditions, PROVISIONED) and not suspended:
            if census.all_running_and_ready:
                set_condition(
                    conditions,
                    type_=PROVISIONED,
                    status="True",
                    reason="AllPodRunningAndReadyFirstTime",
                    message="All Ray Pods are ready for the first time",
                    now=stamp,
                )
            else:
                set_condition(
                    conditions,
                    type_=PROVISIONED,
                    status="False",
                    reason="RayClusterPodsProvisioning",
                    message="RayCluster Pods are being provisioned for first time",
                    now=stamp,
                )
        if suspending:
            if not census.pods:
                set_condition(
                    conditions,
                    type_=PROVISIONED,
                    status="False",
                    reason="RayClusterPodsProvisioning",
                    message="RayCluster has been suspended",
                    now=stamp,
                )
                set_condition(conditions, type_=SUSPENDING, status="False", reason=SUSPENDING, message="", now=stamp)
                set_condition(conditions, type_=SUSPENDED, status="True", reason=SUSPENDED, message="", now=stamp)
        elif suspended:
            if not spec.suspend:
                set_condition(conditions, type_=SUSPENDED, status="False", reason=SUSPENDED, message="", now=stamp)
        else:
            set_condition(conditions, type_=SUSPENDED, status="False", reason=SUSPENDED, message="", now=stamp)
            set_condition(
                conditions,
                type_=SUSPENDING,
                status="True" if spec.suspend else "False",
                reason=SUSPENDING,
                message="",
                now=stamp,
            )
    if spec.suspend and not census.pods:
        state = "suspended"
    head_services = find_head_services(view, services)
    if len(head_services) != 1:
        raise StatusError(
            f"{'no' if not head_services else len(head_services)} head Services found for RayCluster "
            f"{view.namespace}/{view.name}; expected exactly one"
        )
    service = head_services[0]
    cluster_ip = str((service.get("spec") or {}).get("clusterIP") or "")
    pod_ip = str(((head.obj.get("status") or {}).get("podIP") or "") if head is not None else "")
    resources = desired_resources(spec)
    transitions = dict(old.state_transition_times or {})
    if state != old.state:
        transitions[state] = stamp
    endpoints = _endpoints(service)
    return RayClusterStatus(
        state=state,
        reason=reason,
        desired_cpu=resources.cpu,
        desired_memory=resources.memory,
        desired_gpu=resources.gpu,
        desired_tpu=resources.tpu,
        last_update_time=stamp,
        state_transition_times=transitions or None,
        endpoints=endpoints or None,
        head=HeadInfo(
            pod_ip=pod_ip,
            pod_name=head.name if head is not None else "",
            service_ip=pod_ip if cluster_ip == "None" else cluster_ip,
            service_name=str((service.get("metadata") or {}).get("name") or ""),
        ),
        conditions=tuple(conditions) or None,
        ready_worker_replicas=census.ready_workers,
        available_worker_replicas=census.available_workers,
        desired_worker_replicas=desired,
        min_worker_replicas=minimum,
        max_worker_replicas=maximum,
        observed_generation=view.generation,
    )


def status_changed(old: RayClusterStatus, new: RayClusterStatus) -> bool:
    """docs/behaviour.md#1.2's write rule (empty and missing maps/lists compare equal)."""
    return (
        old.state != new.state
        or old.reason != new.reason
        or old.ready_worker_replicas != new.ready_worker_replicas
        or old.available_worker_replicas != new.available_worker_replicas
        or old.desired_worker_replicas != new.desired_worker_replicas
        or old.min_worker_replicas != new.min_worker_replicas
        or old.max_worker_replicas != new.max_worker_replicas
        or (old.endpoints or {}) != (new.endpoints or {})
        or (old.head or HeadInfo()) != (new.head or HeadInfo())
        or (old.conditions or ()) != (new.conditions or ())
    )


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch that turns ``old`` into ``new`` (keys ``new`` lacks become ``null``)."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            patch[key] = merge_patch(before, value)
        else:
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def transitions_of(
    view: ClusterView, old: RayClusterStatus, new: RayClusterStatus, *, now: datetime
) -> tuple[Transition, ...]:
    """The state transition and the condition status changes between ``old`` and ``new``."""

    def transition(field: str, from_value: str, to_value: str, reason: str, message: str = "") -> Transition:
        return Transition(
            kind="RayCluster",
            uid=view.uid,
            namespace=view.namespace,
            name=view.name,
            field=field,
            from_value=from_value,
            to_value=to_value,
            at=now,
            reason=reason,
            message=message,
            resource_version=view.resource_version,
        )

    found: list[Transition] = []
    if old.state != new.state:
        reason = {"ready": "AllPodsRunningAndReady", "suspended": "Suspended"}.get(new.state, "")
        found.append(transition("state", old.state, new.state, reason))
    before = {c.type: c for c in old.conditions or ()}
    after = {c.type: c for c in new.conditions or ()}
    for type_ in [*after, *(t for t in before if t not in after)]:
        was, now_c = before.get(type_), after.get(type_)
        from_value = was.status if was is not None else ""
        to_value = now_c.status if now_c is not None else ""
        if from_value == to_value:
            continue
        found.append(
            transition(
                f"condition/{type_}",
                from_value,
                to_value,
                now_c.reason if now_c is not None else "",
                now_c.message if now_c is not None else "",
            )
        )
    return tuple(found)


def status_builtins(status: RayClusterStatus) -> dict[str, Any]:
    """The status as JSON builtins (defaults omitted, as Go's omitempty would)."""
    out: dict[str, Any] = msgspec.to_builtins(status)
    return out
