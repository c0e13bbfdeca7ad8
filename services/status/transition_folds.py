"""Pure rules that derive a resource's row and its kind view from its confirmed transitions.

Every rule here is idempotent and order-insensitive, because the store applies facts that may arrive
twice (redelivery), late (another status replica, a slow applier) or out of order (results of different
keys interleave on the stream):

- ``first_seen`` is the earliest ``at`` of any fact of the uid, ``updated_at`` the latest, ``last_seq``
  the highest results-stream sequence; ``deleted_at`` is the earliest "deleted" lifecycle fact.
- each field keeps the value of its latest fact, ordered by ``(at, stream sequence)``; applying an
  older or an already-applied fact changes nothing.
- a fact that repeats the step that set its field's latest value (from, to and reason) is no step and is
  not stored (:func:`is_repeat`). This one rule is judged against what is stored when the fact arrives:
  results of one key arrive in order, so only a redelivery can bring the repeat first, and then both are
  stored.

Kind views (the RayJob table) are *folds* over all transitions of one uid, recomputed inside the
persisting transaction: a RayJob has a few dozen transitions, and a fold is trivially correct under
redelivery where an incremental update would need its own ordering rules. A new view is a new fold
plus a table (the RayService view is the second), nothing else changes.

Nothing here does I/O; the store reads rows into :class:`Fact` and writes the results back.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import datetime

import msgspec

from services.status.kinds import LIFECYCLE_DELETED, LIFECYCLE_FIELD


class Fact(msgspec.Struct, frozen=True, kw_only=True):
    """One confirmed transition of a uid, as the folds need it."""

    field: str
    from_value: str
    to_value: str
    at: datetime
    seq: int
    """Sequence of the result message in RAYBUS_RESULTS (the tie-breaker for equal ``at``)."""
    attributes: dict[str, str] = {}
    reason: str = ""


class FieldMark(msgspec.Struct, frozen=True, kw_only=True):
    """The latest value of one field, with the time and stream sequence of the fact that set it."""

    value: str
    at: datetime
    seq: int
    from_value: str | None = None
    """The value that fact moved the field from (None in a mark stored before it was kept)."""
    reason: str | None = None
    """That fact's reason (None in a mark stored before it was kept)."""


class ResourceState(msgspec.Struct, frozen=True, kw_only=True):
    """What the ``resources`` table keeps per uid, besides its identity."""

    first_seen: datetime
    updated_at: datetime
    last_seq: int
    deleted_at: datetime | None = None
    fields: dict[str, FieldMark] = {}


def _is_newer(fact: Fact, mark: FieldMark) -> bool:
    return (fact.at, fact.seq) >= (mark.at, mark.seq)


def apply_fact(state: ResourceState | None, fact: Fact) -> ResourceState:
    """``state`` with ``fact`` merged in (a new state when ``state`` is None)."""
    if state is None:
        state = ResourceState(first_seen=fact.at, updated_at=fact.at, last_seq=fact.seq)
    fields = state.fields
    current = fields.get(fact.field)
    if current is None or _is_newer(fact, current):
        fields = {
            **fields,
            fact.field: FieldMark(
                value=fact.to_value, at=fact.at, seq=fact.seq, from_value=fact.from_value, reason=fact.reason
            ),
        }
    deleted_at = state.deleted_at
    if fact.field == LIFECYCLE_FIELD and fact.to_value == LIFECYCLE_DELETED:
        deleted_at = fact.at if deleted_at is None else min(deleted_at, fact.at)
    return ResourceState(
        first_seen=min(state.first_seen, fact.at),
        updated_at=max(state.updated_at, fact.at),
        last_seq=max(state.last_seq, fact.seq),
        deleted_at=deleted_at,
        fields=fields,
    )


def in_order(facts: Iterable[Fact]) -> list[Fact]:
    """``facts`` in the order every fold applies them: ``(at, results-stream sequence)``."""
    return sorted(facts, key=lambda f: (f.at, f.seq))


def is_repeat(state: ResourceState | None, fact: Fact) -> bool:
    """Whether ``fact`` repeats the step that set its field's latest value (the same values from and to,
    and the same reason: a condition whose reason alone changes steps from a value to the same value).

    Such a fact is no step of the state machine: the field did not move in between. It comes from a
    decision made again before the effect of the first was visible: a RayService's serve Service whose
    create is still in flight is decided, with its ``traffic`` step, again in the next decision, whose
    status write also carries the step. The price: a step that really happens again after a change no fact
    records (that Service deleted by hand and created again) is taken for a repeat too."""
    mark = state.fields.get(fact.field) if state is not None else None
    return (
        mark is not None
        and mark.from_value == fact.from_value
        and mark.value == fact.to_value
        and mark.reason == fact.reason
        and _is_newer(fact, mark)
    )


def without_repeats(state: ResourceState | None, facts: Iterable[Fact]) -> list[Fact]:
    """``facts`` in order, without those that repeat a step (:func:`is_repeat`) on ``state`` or on an
    earlier one of them."""
    kept: list[Fact] = []
    for fact in in_order(facts):
        if not is_repeat(state, fact):
            kept.append(fact)
            state = apply_fact(state, fact)
    return kept


def fold_resource(state: ResourceState | None, facts: Iterable[Fact]) -> ResourceState | None:
    """Apply ``facts`` to ``state`` in order."""
    return functools.reduce(apply_fact, in_order(facts), state)


def status_of(state: ResourceState, status_field: str) -> str:
    """The resource's one-word status: the latest value of its kind's status field, or ""."""
    mark = state.fields.get(status_field)
    return mark.value if mark is not None else ""


# --- RayJob view -----------------------------------------------------------------------------------

RAYJOB_STARTED = "Initializing"
"""KubeRay sets ``startTime`` at each New → Initializing: the start of an attempt (docs/behaviour.md#5.2)."""
RAYJOB_ENDED = frozenset({"Complete", "Failed"})
"""Terminal deployment statuses; KubeRay sets ``endTime`` on entering them."""


class RayJobState(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the ``rayjobs`` view.

    ``attempts`` counts transitions into Initializing (the first start, each retry after Retrying and
    each resume after Suspended); ``ended_at`` is cleared when a new attempt starts. Cluster name, job id
    and submission mode come from the transitions' ``rayClusterName``, ``jobId`` and ``submissionMode``
    attributes (the latest one present wins; KubeRay clears the first two on retry).
    """

    submission_mode: str = ""
    job_id: str = ""
    cluster_name: str = ""
    deployment_status: str = ""
    job_status: str = ""
    attempts: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    updated_at: datetime | None = None


def _rayjob_step(view: RayJobState, fact: Fact) -> RayJobState:
    attrs = fact.attributes
    changes: dict[str, object] = {"updated_at": fact.at}
    if "rayClusterName" in attrs:
        changes["cluster_name"] = attrs["rayClusterName"]
    if "jobId" in attrs:
        changes["job_id"] = attrs["jobId"]
    if "submissionMode" in attrs:
        changes["submission_mode"] = attrs["submissionMode"]
    if fact.field == "jobDeploymentStatus":
        changes["deployment_status"] = fact.to_value
        if fact.to_value == RAYJOB_STARTED:
            changes.update(attempts=view.attempts + 1, started_at=fact.at, ended_at=None)
        elif fact.to_value in RAYJOB_ENDED:
            changes["ended_at"] = fact.at
    elif fact.field == "jobStatus":
        changes["job_status"] = fact.to_value
    return msgspec.structs.replace(view, **changes)


def fold_rayjob(facts: Iterable[Fact]) -> RayJobState:
    """The RayJob view of a uid from all its transitions (any order)."""
    return functools.reduce(_rayjob_step, in_order(facts), RayJobState())


# --- RayService view -------------------------------------------------------------------------------

RAYSERVICE_RUNNING = "Running"
"""``serviceStatus`` of a ready RayService (KubeRay writes "" otherwise)."""


class RayServiceState(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the ``rayservices`` view, folded from the RayService reconcile's transitions.

    The reconcile records ``serviceStatus``, ``condition/<Type>`` and step facts: ``pendingCluster``
    (attribute ``activeCluster``: the cluster it will replace), ``traffic`` (reason
    ``ServiceSelectorSwitched``: the serve Service's selector moved from one cluster to another;
    ``IncrementalStep``/``RollbackStep``: a weight step, attributes ``from``/``to`` clusters and
    ``toPercent``), ``activeCluster`` (a promotion), ``rollback`` (``InProgress`` → ``Complete`` or
    ``Cancelled``) and ``clusterDeleted``.

    An *upgrade* starts when a pending cluster is prepared while an active one exists, and completes
    when that pending cluster is promoted; ``last_upgrade_seconds`` is the time between the two.
    ``serving_cluster`` is the cluster the RayService's serve Service selects (its last selector
    switch); ``pending_traffic_percent`` is the pending cluster's share of the traffic during an
    incremental upgrade (None otherwise).
    """

    service_status: str = ""
    ready_reason: str = ""
    active_cluster: str = ""
    pending_cluster: str = ""
    serving_cluster: str = ""
    pending_traffic_percent: int | None = None
    rollback_status: str = ""
    clusters_created: int = 0
    clusters_deleted: int = 0
    upgrades: int = 0
    rollbacks: int = 0
    ready_at: datetime | None = None
    upgrade_started_at: datetime | None = None
    upgraded_at: datetime | None = None
    last_upgrade_seconds: float | None = None
    updated_at: datetime | None = None


def _percent(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _traffic_step(view: RayServiceState, fact: Fact) -> dict[str, object]:
    attrs = fact.attributes
    if fact.reason == "ServiceSelectorSwitched":
        return {"serving_cluster": fact.to_value}
    percent = _percent(attrs.get("toPercent"))
    if percent is None or not view.pending_cluster:
        return {}
    if attrs.get("to") == view.pending_cluster:
        return {"pending_traffic_percent": percent}
    if attrs.get("from") == view.pending_cluster:
        return {"pending_traffic_percent": 100 - percent}
    return {}


def _rayservice_step(view: RayServiceState, fact: Fact) -> RayServiceState:
    changes: dict[str, object] = {"updated_at": fact.at}
    match fact.field:
        case "serviceStatus":
            changes["service_status"] = fact.to_value
            if fact.to_value == RAYSERVICE_RUNNING and view.ready_at is None:
                changes["ready_at"] = fact.at
        case "condition/Ready":
            changes["ready_reason"] = fact.reason
        case "pendingCluster":
            changes.update(pending_cluster=fact.to_value, pending_traffic_percent=None)
            if fact.to_value:
                changes["clusters_created"] = view.clusters_created + 1
                if fact.attributes.get("activeCluster"):
                    changes["upgrade_started_at"] = fact.at
        case "activeCluster":
            changes["active_cluster"] = fact.to_value
            if view.pending_cluster == fact.to_value:
                changes.update(pending_cluster="", pending_traffic_percent=None)
            if fact.from_value and fact.to_value:
                changes.update(upgrades=view.upgrades + 1, upgraded_at=fact.at)
                if view.upgrade_started_at is not None:
                    changes["last_upgrade_seconds"] = (fact.at - view.upgrade_started_at).total_seconds()
        case "traffic":
            changes.update(_traffic_step(view, fact))
        case "rollback":
            changes["rollback_status"] = fact.to_value
            if fact.to_value == "InProgress":
                changes["rollbacks"] = view.rollbacks + 1
            elif fact.to_value == "Complete":
                changes.update(pending_cluster="", pending_traffic_percent=None)
        case "clusterDeleted":
            changes["clusters_deleted"] = view.clusters_deleted + 1
    return msgspec.structs.replace(view, **changes)


def fold_rayservice(facts: Iterable[Fact]) -> RayServiceState:
    """The RayService view of a uid from all its transitions (any order)."""
    return functools.reduce(_rayservice_step, in_order(facts), RayServiceState())
