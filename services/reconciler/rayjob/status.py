"""The RayJob status of one pass: the working copy, KubeRay's write rule, and the Transitions it carries.

Role: a pass mutates a :class:`StatusDraft`; at the end :meth:`StatusDraft.patch` answers "write or
not" (docs/behaviour.md#5: only when jobStatus, jobDeploymentStatus, the RayCluster status by the RayCluster rule,
or jobStatusCheckFailureStartTime changed) and builds the PatchStatus with its transitions.

Invariants: the draft starts as a copy of the object's status, never aliases it; empty strings and
empty objects are dropped before diffing (Go's ``omitempty``), so a reset field is deleted by the
merge patch; ``endTime`` is stamped when the written deployment status is Complete or Failed.

Not here: the state machine (``rayjob.reconcile``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from schema.messages import ObjectRef, PatchStatus
from schema.ray.rayjob import (
    JOB_DEPLOYMENT_COMPLETE,
    JOB_DEPLOYMENT_FAILED,
    JOB_STATUS_FAILED,
    JOB_STATUS_STOPPED,
    JOB_STATUS_SUCCEEDED,
    JobDeploymentStatus,
    JobStatus,
)
from schema.times import format_time
from services.reconciler.common.patches import compact, is_empty, merge_diff
from services.reconciler.common.transitions import Step, build_transitions

TERMINAL_JOB_STATUSES: Final = frozenset({JOB_STATUS_STOPPED, JOB_STATUS_SUCCEEDED, JOB_STATUS_FAILED})
TERMINAL_DEPLOYMENT_STATUSES: Final = frozenset({JOB_DEPLOYMENT_COMPLETE, JOB_DEPLOYMENT_FAILED})

_CLUSTER_STATUS_FIELDS: Final = (
    "state",
    "reason",
    "readyWorkerReplicas",
    "availableWorkerReplicas",
    "desiredWorkerReplicas",
    "minWorkerReplicas",
    "maxWorkerReplicas",
    "endpoints",
    "head",
    "conditions",
)


def cluster_status_changed(old: object, new: object) -> bool:
    """KubeRay's ``InconsistentRayClusterStatus`` over two copied RayCluster statuses."""
    before = old if isinstance(old, Mapping) else {}
    after = new if isinstance(new, Mapping) else {}
    for field in _CLUSTER_STATUS_FIELDS:
        a, b = before.get(field), after.get(field)
        if is_empty(a) and is_empty(b):
            continue
        if field.endswith("Replicas") and (a in (None, 0)) and (b in (None, 0)):
            continue
        if a != b:
            return True
    return False


class StatusDraft:
    """The status being decided in one reconcile pass."""

    def __init__(self, status: Mapping[str, Any]) -> None:
        self.original: dict[str, Any] = copy.deepcopy(dict(status))
        self.current: dict[str, Any] = copy.deepcopy(dict(status))
        self.steps: list[Step] = []

    def get(self, field: str) -> str:
        """A string field of the draft ("" when absent or not a string)."""
        value = self.current.get(field)
        return value if isinstance(value, str) else ""

    def count(self, field: str) -> int:
        """An int32 counter of the draft (0 when absent)."""
        value = self.current.get(field)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def set(self, field: str, value: Any) -> None:
        """Set (or, with None/"", clear) a field."""
        if value is None or value == "":
            self.current.pop(field, None)
        else:
            self.current[field] = value

    @property
    def deployment(self) -> str:
        """``jobDeploymentStatus`` ("" is New)."""
        return self.get("jobDeploymentStatus")

    @property
    def job_status(self) -> str:
        """``jobStatus`` ("" is New)."""
        return self.get("jobStatus")

    def move(self, to: JobDeploymentStatus, *, reason: str, message: str = "") -> None:
        """Change jobDeploymentStatus, remembering the step for the transition history."""
        before = self.deployment
        if before == to:
            return
        self.steps.append(
            Step(field="jobDeploymentStatus", from_value=before, to_value=to, reason=reason, message=message)
        )
        self.set("jobDeploymentStatus", to)

    def fail(self, reason: str, message: str) -> None:
        """→ Failed with a JobFailedReason and message."""
        self.move(JOB_DEPLOYMENT_FAILED, reason=reason, message=message)
        self.set("reason", reason)
        self.set("message", message)

    def set_job_status(self, value: JobStatus, *, reason: str = "", message: str = "") -> None:
        """Change jobStatus (the Ray job's status), remembering the step."""
        before = self.job_status
        if before == value:
            return
        self.steps.append(Step(field="jobStatus", from_value=before, to_value=value, reason=reason, message=message))
        self.set("jobStatus", value)

    def should_write(self) -> bool:
        """KubeRay's write rule (plus a missing endTime on a terminal job, which raybus repairs)."""
        old, new = self.original, self.current
        for field in ("jobStatus", "jobDeploymentStatus", "jobStatusCheckFailureStartTime"):
            if (old.get(field) or "") != (new.get(field) or ""):
                return True
        return cluster_status_changed(old.get("rayClusterStatus"), new.get("rayClusterStatus"))

    def patch(
        self, *, target: ObjectRef, resource_version: str, now: datetime, observed_generation: int
    ) -> PatchStatus | None:
        """The PatchStatus of this pass, or None when KubeRay's rule says no write."""
        if not self.should_write():
            return None
        if (
            self.deployment in TERMINAL_DEPLOYMENT_STATUSES
            and self.original.get("jobDeploymentStatus") != self.deployment
        ):
            self.current["endTime"] = format_time(now)
        if observed_generation:
            self.current["observedGeneration"] = observed_generation
        self.current["succeeded"] = self.count("succeeded")
        self.current["failed"] = self.count("failed")
        diff = merge_diff(compact(self.original), compact(self.current))
        if not diff:
            return None
        attributes = {
            "rayClusterName": self.get("rayClusterName") or _text(self.original.get("rayClusterName")),
            "jobId": self.get("jobId") or _text(self.original.get("jobId")),
        }
        transitions = build_transitions(
            self.steps, kind="RayJob", target=target, resource_version=resource_version, at=now, attributes=attributes
        )
        return PatchStatus(target=target, status=diff, resource_version=resource_version, transitions=transitions)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
