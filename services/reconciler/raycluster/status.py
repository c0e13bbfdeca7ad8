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
    old, spec = view.status, view.spec
    stamp = format_time(now)
    desired = sum(desired_pods(g) for g in spec.worker_group_specs or ())
    head = _single_head(view, census)
    conditions = list(old.conditions or ())
    if config.gates.ray_cluster_status_conditions:
        conditions = _conditions(view, census, head, desired=desired, error=error, stamp=stamp)
    state, reason = _state(view, census, desired=desired, error=error)
    service = _single_head_service(view, services)
    minimum, maximum = _worker_bounds(view)
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
        head=_head_info(service, head),
        conditions=tuple(conditions) or None,
        ready_worker_replicas=census.ready_workers,
        available_worker_replicas=census.available_workers,
        desired_worker_replicas=desired,
        min_worker_replicas=minimum,
        max_worker_replicas=maximum,
        observed_generation=view.generation,
    )


def _single_head(view: ClusterView, census: PodCensus) -> PodInfo | None:
    """The head pod, or None; several are an error."""
    if len(census.heads) > 1:
        raise StatusError(f"{len(census.heads)} head Pods found for RayCluster {view.namespace}/{view.name}")
    return census.heads[0] if census.heads else None


def _single_head_service(view: ClusterView, services: list[dict[str, Any]]) -> dict[str, Any]:
    """The head Service; none or several are an error."""
    head_services = find_head_services(view, services)
    if len(head_services) != 1:
        raise StatusError(
            f"{'no' if not head_services else len(head_services)} head Services found for RayCluster "
            f"{view.namespace}/{view.name}; expected exactly one"
        )
    return head_services[0]


def _state(view: ClusterView, census: PodCensus, *, desired: int, error: str) -> tuple[str, str]:
    """``state`` and ``reason``: ready once every desired pod runs and is ready (sticky), suspended once a
    suspended cluster has no pods left, else unchanged."""
    state, reason = view.status.state, view.status.reason
    if not error and len(census.pods) == desired + 1 and census.all_running_and_ready:
        state, reason = "ready", ""
    if view.spec.suspend and not census.pods:
        state = "suspended"
    return state, reason


def _conditions(
    view: ClusterView, census: PodCensus, head: PodInfo | None, *, desired: int, error: str, stamp: str
) -> list[Condition]:
    """The conditions of the RayClusterStatusConditions gate: ReplicaFailure cleared, HeadPodReady,
    RayClusterProvisioned, RayClusterSuspending / RayClusterSuspended."""
    conditions = list(view.status.conditions or ())
    if not error and (len(census.pods) == desired + 1 or view.spec.suspend):
        # The applier sets ReplicaFailure when a Pod create or delete failed after its retries; reconcile
        # cannot see that failure, only its end: the Pods are as desired (or being suspended away).
        conditions = [c for c in conditions if c.type != REPLICA_FAILURE]
    value, why, message = head_pod_ready_condition(head)
    set_condition(conditions, type_=HEAD_POD_READY, status=value, reason=why, message=message, now=stamp)
    suspended, suspending = _is_true(conditions, SUSPENDED), _is_true(conditions, SUSPENDING)
    if not _is_true(conditions, PROVISIONED) and not suspended:
        _set_provisioning(conditions, census, stamp)
    _set_suspension(conditions, view, census, suspended=suspended, suspending=suspending, stamp=stamp)
    return conditions


def _set_provisioning(conditions: list[Condition], census: PodCensus, stamp: str) -> None:
    """RayClusterProvisioned until it first turns True: True once every pod runs and is ready."""
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


def _set_suspension(
    conditions: list[Condition], view: ClusterView, census: PodCensus, *, suspended: bool, suspending: bool, stamp: str
) -> None:
    """Suspending → Suspended once the pods are gone; Suspended ends when spec.suspend is cleared;
    otherwise Suspending follows spec.suspend."""
    suspend = view.spec.suspend
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
        if not suspend:
            set_condition(conditions, type_=SUSPENDED, status="False", reason=SUSPENDED, message="", now=stamp)
    else:
        set_condition(conditions, type_=SUSPENDED, status="False", reason=SUSPENDED, message="", now=stamp)
        set_condition(
            conditions,
            type_=SUSPENDING,
            status="True" if suspend else "False",
            reason=SUSPENDING,
            message="",
            now=stamp,
        )


def _worker_bounds(view: ClusterView) -> tuple[int, int]:
    """minWorkerReplicas and maxWorkerReplicas over the groups that are not suspended (hosts counted)."""
    active = [g for g in view.spec.worker_group_specs or () if not g.suspend]
    minimum = sum(g.min_replicas * max(g.num_of_hosts, 1) for g in active)
    maximum = min(sum(g.max_replicas * max(g.num_of_hosts, 1) for g in active), MAX_INT32)
    return minimum, maximum


def _head_info(service: dict[str, Any], head: PodInfo | None) -> HeadInfo:
    """``status.head``: the head pod's IP and name, and the head Service's IP (the pod's when headless)."""
    cluster_ip = str((service.get("spec") or {}).get("clusterIP") or "")
    pod_ip = str(((head.obj.get("status") or {}).get("podIP") or "") if head is not None else "")
    return HeadInfo(
        pod_ip=pod_ip,
        pod_name=head.name if head is not None else "",
        service_ip=pod_ip if cluster_ip == "None" else cluster_ip,
        service_name=str((service.get("metadata") or {}).get("name") or ""),
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
