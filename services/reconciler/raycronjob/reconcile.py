"""The pure RayCronJob reconcile: one scheduled tick per pass, plus concurrency and history policies.

Role: ``reconcile(snapshot, now, config) -> Decision`` for key ``RayCronJob/<ns>/<name>``. The snapshot
holds the ``RayCronJob`` and its child ``RayJob`` entries (label ``ray.io/cronjob-name``).

Behaviour (docs/behaviour.md#7, plus the extensions of docs/differences.md#raycronjob):
- gate ``RayCronJob`` off → empty decision; object gone or being deleted → nothing (children are
  garbage-collected through their owner reference).
- invalid (docs/behaviour.md#8) → Warning ``InvalidRayCronJobSpec``, nothing else.
- finished children beyond ``successfulJobsHistoryLimit`` / ``failedJobsHistoryLimit`` are deleted,
  oldest first (None = keep all: KubeRay's behaviour). This runs even while suspended.
- ``suspend`` → Normal ``SuspendedRayCronJob``, no tick.
- next = the first tick after ``status.lastScheduleTime`` (or the creation time). In the future → wake
  up then. Due → create ``<name>-<floor(next/60)>``, set ``lastScheduleTime = next`` with a ``schedule``
  Transition, and wake at the following tick, or right away when that one is past too, so missed ticks
  are replayed one per pass, in order (``concurrencyPolicy`` Allow, the default: KubeRay).
- Forbid and Replace follow Kubernetes CronJob: only the most recent due tick runs (earlier missed ones
  are skipped); Forbid postpones it while a child is active (Normal ``JobAlreadyActive``, lastScheduleTime
  unchanged, so it starts late once that child finishes, or a later tick replaces it), Replace deletes
  the active children first.

Invariants: pure; the child name and body depend only on the snapshot and the tick; the status patch
carries the cron job's resourceVersion, so a pass on a stale snapshot cannot move lastScheduleTime
backwards (its patch conflicts and is dropped) and its CreateObject is an AlreadyExists no-op.

Not here: parsing (``schedule``), validation (``validation``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from schema.config import OperatorConfig
from schema.decision import Decision, Snapshot
from schema.messages import Command, CreateObject, DeleteObject, EmitEvent, ObjectRef, PatchStatus, Transition
from schema.ray import conventions
from schema.ray.conventions import API_VERSION
from schema.ray.raycronjob import RayCronJobSpec
from schema.ray.rayjob import JOB_DEPLOYMENT_COMPLETE, JOB_DEPLOYMENT_FAILED, JOB_DEPLOYMENT_VALIDATION_FAILED
from schema.times import format_time, parse_time, truncate
from services.reconciler.common.owners import owner_reference
from services.reconciler.raycronjob.schedule import latest_tick, next_tick, parse_schedule
from services.reconciler.raycronjob.validation import validate_raycronjob

_FINISHED_SUCCESS: Final = frozenset({JOB_DEPLOYMENT_COMPLETE})
_FINISHED_FAILURE: Final = frozenset({JOB_DEPLOYMENT_FAILED, JOB_DEPLOYMENT_VALIDATION_FAILED})


def reconcile(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    """Decide what one RayCronJob needs now (see the module docstring).

    Args:
        snapshot: every entry of the key ``RayCronJob/<ns>/<name>``.
        now: the time of the event being handled.
        config: operator configuration (the ``RayCronJob`` gate).

    Returns:
        The commands, the next wake-up (the next tick), and the rules that fired.
    """
    if not config.gates.ray_cron_job:
        return Decision()  # the controller does not run at all
    cron = snapshot.owner()
    if cron is None:
        return Decision(rules=("7/gone",))
    metadata = _mapping(cron.get("metadata"))
    if metadata.get("deletionTimestamp"):
        return Decision(rules=("7/being-deleted",))
    ref = _cron_ref(snapshot, metadata)
    spec, error = validate_raycronjob(cron, config=config)
    if spec is None:
        message = f"{ref.namespace}/{ref.name}: {error}"
        event = EmitEvent(regarding=ref, event_type="Warning", reason="InvalidRayCronJobSpec", message=message)
        return Decision(commands=(event,), rules=("8/raycronjob-invalid",))
    plan = _Plan(cron=cron, spec=spec, ref=ref, now=now)
    children = _children(snapshot, ref)
    history = _trim_history(plan, children)
    if spec.suspend:
        return _suspended(plan)
    return _schedule(plan, [child for child in children if child not in history])


@dataclass
class _Plan:
    """One pass over a valid RayCronJob: what it reads, and the commands and rules decided so far."""

    cron: Mapping[str, Any]
    spec: RayCronJobSpec
    ref: ObjectRef
    now: datetime
    commands: list[Command] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)

    def decision(self, wake_at: datetime | None = None) -> Decision:
        """The decision of this pass."""
        return Decision(commands=tuple(self.commands), wake_at=wake_at, rules=tuple(self.rules))


def _trim_history(plan: _Plan, children: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Delete the finished children beyond the history limits (also while suspended); returns them."""
    history = _history_deletions(plan.spec, children)
    if history:
        plan.commands.extend(_delete_child(child) for child in history)
        plan.rules.append("ext/history-limit")
    return history


def _suspended(plan: _Plan) -> Decision:
    """``suspend``: say so, and schedule nothing."""
    plan.commands.append(
        EmitEvent(
            regarding=plan.ref,
            event_type="Normal",
            reason="SuspendedRayCronJob",
            message="RayCronJob suspended, no new RayJobs will be created",
        )
    )
    plan.rules.append("7/suspended")
    return plan.decision()


def _schedule(plan: _Plan, children: list[dict[str, Any]]) -> Decision:
    """The tick after ``lastScheduleTime``: wait for it, or run it (as the concurrency policy allows)."""
    spec, ref, now = plan.spec, plan.ref, plan.now
    schedule = parse_schedule(spec.schedule, spec.time_zone)
    metadata = _mapping(plan.cron.get("metadata"))
    previous = _mapping(plan.cron.get("status")).get("lastScheduleTime")
    start = parse_time(previous) or parse_time(metadata.get("creationTimestamp")) or truncate(now)
    first_due = next_tick(schedule, start)
    if first_due is None:
        plan.rules.append("7/no-next-tick")
        return plan.decision()
    if first_due > now:
        plan.rules.append("7/wait-next-tick")
        return plan.decision(wake_at=first_due)
    policy = spec.concurrency_policy
    # Allow (KubeRay): every missed tick, one per pass. Forbid/Replace (Kubernetes CronJob): only the most
    # recent one; a backlog of runs that may not overlap, or that replace each other, makes no sense.
    tick = first_due if policy == "Allow" else (latest_tick(schedule, now) or first_due)
    child_name = f"{ref.name}-{int(tick.timestamp()) // 60}"
    active = [child for child in children if _is_active(child) and _name(child) != child_name]
    if policy == "Forbid" and active:
        return _postpone(plan, tick, running=_name(active[0]), wake_at=next_tick(schedule, now))
    if policy == "Replace" and active:
        plan.rules.append("ext/replace-delete")
        plan.commands.extend(_delete_child(child) for child in active)
    _start(plan, child_name, tick, previous=previous if isinstance(previous, str) else "", first_due=first_due)
    following = next_tick(schedule, tick)
    if following is not None and following <= now:
        plan.rules.append("7/catch-up")
    return plan.decision(wake_at=None if following is None else max(following, now))


def _postpone(plan: _Plan, tick: datetime, *, running: str, wake_at: datetime | None) -> Decision:
    """Forbid with a child running: Kubernetes does not start the tick, but does not give it up either:
    lastScheduleTime stays, so the event of the finishing RayJob starts the most recent tick then (late),
    or a later tick does."""
    plan.rules.append("ext/forbid-postpone")
    plan.commands.append(
        EmitEvent(
            regarding=plan.ref,
            event_type="Normal",
            reason="JobAlreadyActive",
            message=(
                f"Not starting RayJob for {format_time(tick)} because prior execution {running} is "
                "running and concurrency policy is Forbid"
            ),
        )
    )
    return plan.decision(wake_at=wake_at)


def _start(plan: _Plan, child_name: str, tick: datetime, *, previous: str, first_due: datetime) -> None:
    """Create the tick's RayJob and move lastScheduleTime to the tick, with its ``schedule`` Transition."""
    ref, metadata = plan.ref, _mapping(plan.cron.get("metadata"))
    plan.rules.append("7/create-rayjob")
    plan.commands.append(_create_child(plan.cron, ref=ref, child_name=child_name, tick=tick))
    message = f"concurrencyPolicy={plan.spec.concurrency_policy}"
    if tick != first_due:
        message += f"; missed ticks from {format_time(first_due)} skipped"
    tick_text = format_time(tick)
    transition = Transition(
        kind="RayCronJob",
        uid=ref.uid,
        namespace=ref.namespace,
        name=ref.name,
        field="schedule",
        from_value=previous,
        to_value=tick_text,
        at=plan.now,
        reason="Scheduled",
        message=message,
        resource_version=_resource_version(metadata),
        attributes={"rayJobName": child_name},
    )
    plan.commands.append(
        PatchStatus(
            target=ref,
            status={"lastScheduleTime": tick_text},
            resource_version=_resource_version(metadata),
            transitions=(transition,),
        )
    )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    name = _mapping(obj.get("metadata")).get("name")
    return name if isinstance(name, str) else ""


def _resource_version(metadata: Mapping[str, Any]) -> str:
    value = metadata.get("resourceVersion")
    return value if isinstance(value, str) else ""


def _cron_ref(snapshot: Snapshot, metadata: Mapping[str, Any]) -> ObjectRef:
    uid = metadata.get("uid")
    return ObjectRef(
        api_version=API_VERSION,
        kind="RayCronJob",
        namespace=snapshot.key.namespace,
        name=snapshot.key.name,
        uid=uid if isinstance(uid, str) else "",
    )


def _children(snapshot: Snapshot, ref: ObjectRef) -> list[dict[str, Any]]:
    """RayJobs labelled with this cron job's name and, when they name a controller, owned by it."""
    found: list[dict[str, Any]] = []
    for job in snapshot.of_kind("RayJob"):
        metadata = _mapping(job.get("metadata"))
        if _mapping(metadata.get("labels")).get(conventions.LABEL_CRONJOB_NAME) != ref.name:
            continue
        owners = metadata.get("ownerReferences")
        controllers = (
            [o for o in owners if isinstance(o, Mapping) and o.get("controller") is True]
            if isinstance(owners, list)
            else []
        )
        if ref.uid and controllers and not any(o.get("uid") == ref.uid for o in controllers):
            continue
        found.append(job)
    return found


def _deployment_status(job: Mapping[str, Any]) -> str:
    value = _mapping(job.get("status")).get("jobDeploymentStatus")
    return value if isinstance(value, str) else ""


def _is_active(job: Mapping[str, Any]) -> bool:
    """Not finished (Complete / Failed / ValidationFailed) and not already being deleted."""
    if _mapping(job.get("metadata")).get("deletionTimestamp"):
        return False
    return _deployment_status(job) not in _FINISHED_SUCCESS | _FINISHED_FAILURE


def _scheduled_at(job: Mapping[str, Any]) -> tuple[str, str, str]:
    """Sort key, oldest first: scheduled timestamp, then creation time, then name."""
    metadata = _mapping(job.get("metadata"))
    annotated = parse_time(_mapping(metadata.get("annotations")).get(conventions.ANN_CRONJOB_SCHEDULED_TIMESTAMP))
    created = parse_time(metadata.get("creationTimestamp"))
    return (
        format_time(annotated) if annotated else "",
        format_time(created) if created else "",
        _name(job),
    )


def _history_deletions(spec: RayCronJobSpec, children: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Finished children beyond the history limits, oldest first (Kubernetes CronJob semantics)."""
    doomed: list[dict[str, Any]] = []
    for limit, statuses in (
        (spec.successful_jobs_history_limit, _FINISHED_SUCCESS),
        (spec.failed_jobs_history_limit, _FINISHED_FAILURE),
    ):
        if limit is None:
            continue
        finished = [
            child
            for child in children
            if _deployment_status(child) in statuses and not _mapping(child.get("metadata")).get("deletionTimestamp")
        ]
        finished.sort(key=_scheduled_at)
        excess = len(finished) - max(limit, 0)
        if excess > 0:
            doomed.extend(finished[:excess])
    return doomed


def _delete_child(child: Mapping[str, Any]) -> DeleteObject:
    metadata = _mapping(child.get("metadata"))
    uid = metadata.get("uid")
    namespace = metadata.get("namespace")
    return DeleteObject(
        target=ObjectRef(
            api_version=API_VERSION,
            kind="RayJob",
            namespace=namespace if isinstance(namespace, str) else "",
            name=_name(child),
            uid=uid if isinstance(uid, str) else "",
        ),
        propagation="Background",
    )


def _create_child(cron: Mapping[str, Any], *, ref: ObjectRef, child_name: str, tick: datetime) -> CreateObject:
    """The child RayJob: labels, scheduled-timestamp annotation, owner = the cron job, spec = jobTemplate."""
    template = _mapping(cron.get("spec")).get("jobTemplate")
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "RayJob",
        "metadata": {
            "name": child_name,
            "namespace": ref.namespace,
            "labels": {conventions.LABEL_CRONJOB_NAME: ref.name},
            "annotations": {conventions.ANN_CRONJOB_SCHEDULED_TIMESTAMP: format_time(tick)},
            "ownerReferences": [owner_reference(ref)],
        },
        "spec": copy.deepcopy(dict(template)) if isinstance(template, Mapping) else {},
    }
    target = ObjectRef(api_version=API_VERSION, kind="RayJob", namespace=ref.namespace, name=child_name)
    return CreateObject(target=target, body=body)
