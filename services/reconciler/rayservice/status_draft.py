"""The RayService status of one pass: the working copy, KubeRay's write rule, conditions, Transitions.

Role: a pass mutates a :class:`StatusDraft` (cluster names, application maps, traffic, conditions);
at the end :meth:`StatusDraft.patch` answers "write or not" with KubeRay's
``InconsistentRayServiceStatuses`` (docs/behaviour.md#6: serviceStatus, numServeEndpoints, conditions, or the
active/pending cluster name, applications and, with the incremental gate, traffic/capacity/migration
time; a change of ``rayClusterStatus`` alone never writes) and builds the PatchStatus with the
Transitions of the pass.

Invariants:
- The draft starts as a deep copy of the object's status and never aliases it.
- Conditions follow ``meta.SetStatusCondition``: ``lastTransitionTime`` moves only when the status
  changes (or when a fresh transition is asked for), reason/message/observedGeneration always update.
- Transitions: ``serviceStatus`` and ``condition/<Type>`` (status or reason changed) are derived by
  diffing; step facts (``pendingCluster``, ``traffic``, ``activeCluster``, ``rollback``,
  ``clusterDeleted``) are recorded by the pass. A pass with step facts writes even when KubeRay's rule
  would not (``lastUpdateTime`` only), so the fact reaches the history: the one deliberate deviation.

Not here: what the status should become (``compute_status``, ``incremental``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, Literal

from schema.messages import ObjectRef, PatchStatus
from schema.objects import mapping, text
from schema.times import format_time
from services.reconciler.common.patches import compact, merge_diff
from services.reconciler.common.transitions import Step, build_transitions

Role = Literal["activeServiceStatus", "pendingServiceStatus"]
ACTIVE: Final[Role] = "activeServiceStatus"
PENDING: Final[Role] = "pendingServiceStatus"

READY: Final = "Ready"
UPGRADE_IN_PROGRESS: Final = "UpgradeInProgress"
ROLLBACK_IN_PROGRESS: Final = "RollbackInProgress"
SUSPENDING: Final = "Suspending"
SUSPENDED: Final = "Suspended"

_TRAFFIC_FIELDS: Final = ("trafficRoutedPercent", "targetCapacity", "lastTrafficMigratedTime")


def _apps_differ(old: object, new: object) -> bool:
    """KubeRay's application comparison: count, then each app's and deployment's status and message."""
    before, after = mapping(old), mapping(new)
    if len(before) != len(after):
        return True
    for name, app in after.items():
        if name not in before:
            return True
        was, now = mapping(before[name]), mapping(app)
        if was.get("status") != now.get("status") or was.get("message") != now.get("message"):
            return True
        old_deployments = mapping(was.get("serveDeploymentStatuses"))
        new_deployments = mapping(now.get("serveDeploymentStatuses"))
        if len(old_deployments) != len(new_deployments):
            return True
        for deployment, state in new_deployments.items():
            if deployment not in old_deployments:
                return True
            prior, current = mapping(old_deployments[deployment]), mapping(state)
            if prior.get("status") != current.get("status") or prior.get("message") != current.get("message"):
                return True
    return False


def _cluster_status_differs(old: Mapping[str, Any], new: Mapping[str, Any], *, incremental_gate: bool) -> bool:
    if text(old.get("rayClusterName")) != text(new.get("rayClusterName")):
        return True
    if incremental_gate and any(old.get(f) != new.get(f) for f in _TRAFFIC_FIELDS):
        return True
    return _apps_differ(old.get("applicationStatuses"), new.get("applicationStatuses"))


class StatusDraft:
    """The status being decided in one reconcile pass."""

    def __init__(self, status: Mapping[str, Any]) -> None:
        self.original: dict[str, Any] = copy.deepcopy(dict(status))
        self.current: dict[str, Any] = copy.deepcopy(dict(status))
        for role in (ACTIVE, PENDING):
            if not isinstance(self.current.get(role), dict):
                self.current[role] = {}
        conditions = self.current.get("conditions")
        self.current["conditions"] = (
            [dict(c) for c in conditions if isinstance(c, Mapping)] if isinstance(conditions, list) else []
        )
        self.steps: list[Step] = []

    # -- clusters -------------------------------------------------------------------------------------
    def cluster(self, role: Role) -> dict[str, Any]:
        """The mutable active/pending RayServiceStatus."""
        value: dict[str, Any] = self.current[role]
        return value

    def cluster_name(self, role: Role) -> str:
        """``<role>.rayClusterName`` ("" when unset)."""
        return text(self.cluster(role).get("rayClusterName"))

    def set_cluster(self, role: Role, value: dict[str, Any]) -> None:
        """Replace a whole active/pending RayServiceStatus."""
        self.current[role] = value

    def set_field(self, role: Role, field: str, *, value: Any) -> None:
        """Set (or, with None, clear) a field of the active/pending status."""
        if value is None:
            self.cluster(role).pop(field, None)
        else:
            self.cluster(role)[field] = value

    def int_field(self, role: Role, field: str) -> int | None:
        """An int32 field of the active/pending status (None: unset, as KubeRay's pointers)."""
        value = self.cluster(role).get(field)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    # -- conditions -----------------------------------------------------------------------------------
    @property
    def conditions(self) -> list[dict[str, Any]]:
        """The mutable condition list."""
        value: list[dict[str, Any]] = self.current["conditions"]
        return value

    def condition(self, type_: str) -> dict[str, Any] | None:
        """The condition of ``type_``, or None."""
        return next((c for c in self.conditions if c.get("type") == type_), None)

    def is_true(self, type_: str) -> bool:
        """The condition exists with status True."""
        found = self.condition(type_)
        return found is not None and found.get("status") == "True"

    def reason(self, type_: str) -> str:
        """The reason of a condition ("" when absent)."""
        found = self.condition(type_)
        return text(found.get("reason")) if found is not None else ""

    def set_condition(
        self,
        type_: str,
        *,
        status: str,
        reason: str,
        message: str,
        now: datetime,
        observed_generation: int,
        fresh: bool = False,
    ) -> None:
        """``meta.SetStatusCondition``; ``fresh`` forces a new lastTransitionTime (a reset, docs/behaviour.md#6.5)."""
        found = self.condition(type_)
        if found is None:
            self.conditions.append(
                {
                    "type": type_,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": format_time(now),
                    "observedGeneration": observed_generation,
                }
            )
            return
        if found.get("status") != status or fresh:
            found["lastTransitionTime"] = format_time(now)
        found["status"] = status
        found["reason"] = reason
        found["message"] = message
        found["observedGeneration"] = observed_generation

    def remove_condition(self, type_: str) -> None:
        """``meta.RemoveStatusCondition``."""
        self.current["conditions"] = [c for c in self.conditions if c.get("type") != type_]

    # -- scalar fields --------------------------------------------------------------------------------
    def get(self, field: str) -> Any:
        """A top-level field."""
        return self.current.get(field)

    def set(self, field: str, value: Any) -> None:
        """Set (or, with None, clear) a top-level field."""
        if value is None:
            self.current.pop(field, None)
        else:
            self.current[field] = value

    # -- transitions ----------------------------------------------------------------------------------
    def step(
        self,
        field: str,
        *,
        from_value: str,
        to_value: str,
        reason: str,
        message: str,
        attributes: dict[str, str] | None = None,
    ) -> None:
        """Record a step fact of this pass (``pendingCluster``, ``traffic``, ``activeCluster``, ...)."""
        self.steps.append(
            Step(
                field=field,
                from_value=from_value,
                to_value=to_value,
                reason=reason,
                message=message,
                attributes=attributes,
            )
        )

    def should_write(self, *, incremental_gate: bool) -> bool:
        """KubeRay's ``InconsistentRayServiceStatuses``."""
        old, new = self.original, self.current
        if text(old.get("serviceStatus")) != text(new.get("serviceStatus")):
            return True
        if (old.get("numServeEndpoints") or 0) != (new.get("numServeEndpoints") or 0):
            return True
        if (old.get("conditions") or []) != (new.get("conditions") or []):
            return True
        return any(
            _cluster_status_differs(mapping(old.get(role)), mapping(new.get(role)), incremental_gate=incremental_gate)
            for role in (ACTIVE, PENDING)
        )

    def _derived_steps(self) -> list[Step]:
        found: list[Step] = []
        before, after = text(self.original.get("serviceStatus")), text(self.current.get("serviceStatus"))
        if before != after:
            found.append(
                Step(
                    field="serviceStatus",
                    from_value=before,
                    to_value=after,
                    reason=text(mapping(self.condition(READY)).get("reason")),
                    message="",
                    attributes={},
                )
            )
        old_conditions = {
            text(c.get("type")): c for c in self.original.get("conditions") or [] if isinstance(c, Mapping)
        }
        new_conditions = {text(c.get("type")): c for c in self.conditions}
        for type_ in [*new_conditions, *(t for t in old_conditions if t not in new_conditions)]:
            old_c, new_c = mapping(old_conditions.get(type_)), mapping(new_conditions.get(type_))
            old_pair = (text(old_c.get("status")), text(old_c.get("reason")))
            new_pair = (text(new_c.get("status")), text(new_c.get("reason")))
            if old_pair != new_pair:
                found.append(
                    Step(
                        field=f"condition/{type_}",
                        from_value=old_pair[0],
                        to_value=new_pair[0],
                        reason=new_pair[1],
                        message=text(new_c.get("message")),
                        attributes={"fromReason": old_pair[1]} if old_pair[1] else {},
                    )
                )
        return found

    def patch(
        self, *, target: ObjectRef, resource_version: str, now: datetime, incremental_gate: bool
    ) -> PatchStatus | None:
        """The PatchStatus of this pass, or None when nothing is to be written."""
        if not self.should_write(incremental_gate=incremental_gate) and not self.steps:
            return None
        self.current["lastUpdateTime"] = format_time(now)
        diff = merge_diff(compact(self.original), compact(self.current))
        if not diff:
            if not self.steps:
                return None
            # Nothing else changed (same second): the patch still carries the step facts.
            diff = {"lastUpdateTime": self.current["lastUpdateTime"]}
        transitions = build_transitions(
            [*self._derived_steps(), *self.steps],
            kind="RayService",
            target=target,
            resource_version=resource_version,
            at=now,
        )
        return PatchStatus(target=target, status=diff, resource_version=resource_version, transitions=transitions)
