"""NewClusterWithIncrementalUpgrade (docs/behaviour.md#6.4): Gateway ``<rs>-gateway``, HTTPRoute ``<rs>-httproute``
with weights, traffic steps every ``intervalSeconds``, Serve ``target_capacity`` steps, completion and
rollback.

Role: pure helpers over the status draft and the snapshot's Gateway/HTTPRoute: the bodies, their
readiness (Gateway Accepted and Programmed; HTTPRoute Accepted and ResolvedRefs for its Gateway
parent), KubeRay's ``calculateTrafficRoutedPercent`` and ``reconcileServeTargetCapacity``, and the
rollback mirror of both (traffic and capacity move back to the active cluster).

Time: a traffic step is due ``intervalSeconds`` after the moving cluster's ``lastTrafficMigratedTime``;
:func:`next_traffic_step` gives that instant so the pass asks for a wake-up instead of polling.

Invariants: pure; weights always sum to 100; the pending weight never exceeds the pending
target_capacity (and, in a rollback, the active weight never exceeds the active target_capacity).

Not here: applying anything (``reconcile`` emits the commands).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from schema.objects import integer, mapping, text
from schema.ray import conventions
from schema.times import parse_time
from services.reconciler.rayservice import names
from services.reconciler.rayservice.model import UpgradeOptions
from services.reconciler.rayservice.status_draft import ACTIVE, PENDING, StatusDraft


def gateway_body(*, rayservice: str, namespace: str, class_name: str, owner: dict[str, Any]) -> dict[str, Any]:
    """``<rs>-gateway``: one HTTP listener on port 80 (KubeRay's ``createGateway``)."""
    return {
        "apiVersion": conventions.GATEWAY_API_VERSION,
        "kind": "Gateway",
        "metadata": {"name": names.gateway_name(rayservice), "namespace": namespace, "ownerReferences": [owner]},
        "spec": gateway_spec(class_name),
    }


def gateway_spec(class_name: str) -> dict[str, Any]:
    """The Gateway's spec."""
    return {
        "gatewayClassName": class_name,
        "listeners": [{"name": names.GATEWAY_LISTENER_NAME, "protocol": "HTTP", "port": names.GATEWAY_LISTENER_PORT}],
    }


def httproute_spec(*, rayservice: str, namespace: str, backends: list[tuple[str, int, int]]) -> dict[str, Any]:
    """The HTTPRoute's spec: parent the Gateway, prefix ``/``, weighted ``(service, port, weight)`` backends."""
    return {
        "parentRefs": [{"name": names.gateway_name(rayservice), "namespace": namespace}],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": [
                    {"name": service, "namespace": namespace, "port": port, "weight": weight}
                    for service, port, weight in backends
                ],
            }
        ],
    }


def httproute_body(*, rayservice: str, namespace: str, spec: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    """``<rs>-httproute`` owned by the RayService."""
    return {
        "apiVersion": conventions.GATEWAY_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": {"name": names.httproute_name(rayservice), "namespace": namespace, "ownerReferences": [owner]},
        "spec": spec,
    }


def _true(conditions: object, type_: str) -> bool:
    if not isinstance(conditions, list):
        return False
    return any(isinstance(c, Mapping) and c.get("type") == type_ and c.get("status") == "True" for c in conditions)


def gateway_ready(gateway: Mapping[str, Any] | None) -> bool:
    """The Gateway reports Accepted and Programmed."""
    conditions = mapping(mapping(gateway).get("status")).get("conditions")
    return _true(conditions, "Accepted") and _true(conditions, "Programmed")


def httproute_ready(route: Mapping[str, Any] | None, *, gateway: str) -> bool:
    """The HTTPRoute's status for its Gateway parent reports Accepted and ResolvedRefs."""
    parents = mapping(mapping(route).get("status")).get("parents")
    for parent in parents if isinstance(parents, list) else []:
        parent = mapping(parent)
        if text(mapping(parent.get("parentRef")).get("name")) != gateway:
            continue
        conditions = parent.get("conditions")
        if _true(conditions, "Accepted") and _true(conditions, "ResolvedRefs"):
            return True
    return False


def _interval_passed(last: object, *, interval: int, now: datetime) -> bool:
    moment = parse_time(last)
    return moment is None or now - moment >= timedelta(seconds=interval)


def traffic_weights(
    status: StatusDraft, *, options: UpgradeOptions, pending_ready: bool, rolling_back: bool, now: datetime
) -> tuple[int, int]:
    """KubeRay's ``calculateTrafficRoutedPercent`` → ``(active weight, pending weight)``.

    Forward: while the pending cluster is ready, every ``intervalSeconds`` the pending weight grows by
    ``stepSizePercent``, capped at 100 and at the pending target_capacity. Rollback (docs/behaviour.md#6.4): the
    mirror image, the active weight grows back up to the active target_capacity.
    """
    active = status.int_field(ACTIVE, "trafficRoutedPercent")
    pending = status.int_field(PENDING, "trafficRoutedPercent")
    active_weight = 100 if active is None else active
    pending_weight = 0 if pending is None else pending
    step = options.step_size_percent or 0
    interval = options.interval_seconds or 0
    if rolling_back:
        capacity = status.int_field(ACTIVE, "targetCapacity")
        capacity = 100 if capacity is None else capacity
        if active_weight == capacity:
            return active_weight, pending_weight
        last = status.cluster(ACTIVE).get("lastTrafficMigratedTime")
        if _interval_passed(last, interval=interval, now=now):
            active_weight = max(0, min(100, active_weight + step, capacity))
            pending_weight = 100 - active_weight
        return active_weight, pending_weight
    if pending_ready:
        capacity = status.int_field(PENDING, "targetCapacity")
        capacity = 0 if capacity is None else capacity
        if pending_weight == capacity:
            return active_weight, pending_weight
        last = status.cluster(PENDING).get("lastTrafficMigratedTime")
        if _interval_passed(last, interval=interval, now=now):
            pending_weight = max(0, min(100, pending_weight + step, capacity))
            active_weight = 100 - pending_weight
    return active_weight, pending_weight


def next_traffic_step(
    status: StatusDraft, *, options: UpgradeOptions, pending_ready: bool, rolling_back: bool
) -> datetime | None:
    """When the next traffic step is due (None: no step is waiting on time)."""
    interval = options.interval_seconds or 0
    if rolling_back:
        capacity = status.int_field(ACTIVE, "targetCapacity")
        weight = status.int_field(ACTIVE, "trafficRoutedPercent")
        if (100 if weight is None else weight) == (100 if capacity is None else capacity):
            return None
        last = parse_time(status.cluster(ACTIVE).get("lastTrafficMigratedTime"))
    else:
        if not pending_ready:
            return None
        capacity = status.int_field(PENDING, "targetCapacity")
        weight = status.int_field(PENDING, "trafficRoutedPercent")
        if (0 if weight is None else weight) == (0 if capacity is None else capacity):
            return None
        last = parse_time(status.cluster(PENDING).get("lastTrafficMigratedTime"))
    return None if last is None else last + timedelta(seconds=interval)


def needs_capacity_update(status: StatusDraft, *, gateway_ok: bool, route_ok: bool) -> bool:
    """KubeRay's ``checkIfNeedTargetCapacityUpdate`` (both clusters, Gateway and HTTPRoute ready, not done)."""
    if not status.cluster_name(ACTIVE) or not status.cluster_name(PENDING):
        return False
    if not gateway_ok or not route_ok:
        return False
    for role in (ACTIVE, PENDING):
        if status.int_field(role, "targetCapacity") is None or status.int_field(role, "trafficRoutedPercent") is None:
            return True
    return not (status.int_field(ACTIVE, "targetCapacity") == 0 and status.int_field(PENDING, "targetCapacity") == 100)


def capacity_goal(status: StatusDraft, *, cluster: str, options: UpgradeOptions) -> int | None:
    """KubeRay's ``reconcileServeTargetCapacity`` for ``cluster``: its new target_capacity, or None.

    Sets the defaults (active 100, pending 0) on the draft as KubeRay does. Nothing moves until the
    pending traffic has caught up with the pending capacity; then, when the two capacities sum to more
    than 100 the active one goes down by ``maxSurgePercent``, else the pending one goes up by it.
    """
    if status.int_field(ACTIVE, "targetCapacity") is None:
        status.set_field(ACTIVE, "targetCapacity", value=100)
    if status.int_field(PENDING, "targetCapacity") is None:
        status.set_field(PENDING, "targetCapacity", value=0)
    active_capacity = status.int_field(ACTIVE, "targetCapacity") or 0
    pending_capacity = status.int_field(PENDING, "targetCapacity") or 0
    pending_traffic = status.int_field(PENDING, "trafficRoutedPercent") or 0
    surge = 100 if options.max_surge_percent is None else options.max_surge_percent
    if pending_capacity != pending_traffic:
        return None
    if cluster == status.cluster_name(ACTIVE) and active_capacity + pending_capacity > 100:
        return max(0, active_capacity - surge)
    if cluster == status.cluster_name(PENDING) and active_capacity + pending_capacity <= 100:
        return min(100, pending_capacity + surge)
    return None


def rollback_capacity_goal(status: StatusDraft, *, cluster: str, options: UpgradeOptions) -> int | None:
    """The rollback mirror of :func:`capacity_goal`: once the active traffic has caught up with the
    active capacity, the pending capacity goes down by ``maxSurgePercent`` while the two sum to more
    than 100, else the active capacity goes up by it (until active is 100 and pending 0)."""
    active_capacity = status.int_field(ACTIVE, "targetCapacity")
    pending_capacity = status.int_field(PENDING, "targetCapacity")
    active_capacity = 100 if active_capacity is None else active_capacity
    pending_capacity = 0 if pending_capacity is None else pending_capacity
    active_traffic = status.int_field(ACTIVE, "trafficRoutedPercent")
    active_traffic = 100 if active_traffic is None else active_traffic
    surge = 100 if options.max_surge_percent is None else options.max_surge_percent
    if active_capacity != active_traffic:
        return None
    if cluster == status.cluster_name(PENDING) and active_capacity + pending_capacity > 100 and pending_capacity > 0:
        return max(0, pending_capacity - surge)
    if cluster == status.cluster_name(ACTIVE) and active_capacity + pending_capacity <= 100 and active_capacity < 100:
        return min(100, active_capacity + surge)
    if cluster == status.cluster_name(PENDING) and active_capacity == 100 and pending_capacity > 0:
        return max(0, pending_capacity - surge)
    return None


def rollback_complete(status: StatusDraft, *, pending_ready: bool) -> bool:
    """Active back at 100/100 and pending at 0/0, or the pending head is not ready (docs/behaviour.md#6.4)."""
    if not pending_ready:
        return True
    fields = (
        status.int_field(ACTIVE, "trafficRoutedPercent"),
        status.int_field(ACTIVE, "targetCapacity"),
        status.int_field(PENDING, "trafficRoutedPercent"),
        status.int_field(PENDING, "targetCapacity"),
    )
    return fields == (100, 100, 0, 0)


def upgrade_complete(status: StatusDraft) -> bool:
    """KubeRay's ``IsIncrementalUpgradeComplete``: active capacity 0 and pending traffic 100."""
    return status.int_field(ACTIVE, "targetCapacity") == 0 and status.int_field(PENDING, "trafficRoutedPercent") == 100


def route_weights(route: Mapping[str, Any] | None, *, active_service: str, pending_service: str) -> tuple[int, int]:
    """KubeRay's ``GetWeightsFromHTTPRoute``: the weights of the two backends (-1 when absent)."""
    active, pending = -1, -1
    rules = mapping(mapping(route).get("spec")).get("rules")
    for rule in rules if isinstance(rules, list) else []:
        refs = mapping(rule).get("backendRefs")
        for ref in refs if isinstance(refs, list) else []:
            ref = mapping(ref)
            weight = integer(ref.get("weight"))
            if weight is None:
                continue
            if text(ref.get("name")) == active_service:
                active = weight
            elif pending_service and text(ref.get("name")) == pending_service:
                pending = weight
    return active, pending
