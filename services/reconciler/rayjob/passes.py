"""One RayJob reconcile pass: its inputs, the command list being built, and the wake-up it asks for.

Role: the mutable scratchpad of a single ``reconcile`` call (never shared between calls, never stored
at module level). Handlers append commands and rules, move the status draft, and may ``halt`` (KubeRay
returns early with an error: no status write this pass). :meth:`Pass.decision` turns it into a frozen
:class:`Decision` whose ``wake_at`` is the earliest deadline of the state the pass ends in.

Invariants: ``wake_at`` is always strictly after ``now`` (or None); deadlines are recomputed from the
final status draft, so a pass that changes state asks for the new state's deadlines.

Not here: the state handlers (``reconcile``, ``running``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from schema.config import OperatorConfig
from schema.decision import Decision, Snapshot
from schema.messages import Command, CreateObject, DeleteObject, EmitEvent, EventKind, ObjectRef, Propagation
from schema.ray.rayjob import JOB_DEPLOYMENT_INITIALIZING, JOB_DEPLOYMENT_RUNNING, JOB_DEPLOYMENT_WAITING, RayJobSpec
from schema.times import after_seconds, parse_time
from services.reconciler.rayjob.cluster import mapping, text
from services.reconciler.rayjob.status import TERMINAL_JOB_STATUSES, StatusDraft


class Pass:
    """Inputs and outputs of one RayJob reconcile pass."""

    def __init__(
        self,
        *,
        snapshot: Snapshot,
        rayjob: Mapping[str, Any],
        spec: RayJobSpec,
        ref: ObjectRef,
        now: datetime,
        config: OperatorConfig,
    ) -> None:
        self.snapshot = snapshot
        self.rayjob = rayjob
        self.spec = spec
        self.ref = ref
        self.now = now
        self.config = config
        metadata = mapping(rayjob.get("metadata"))
        self.raw_spec = mapping(rayjob.get("spec"))
        self.resource_version = text(metadata.get("resourceVersion"))
        generation = metadata.get("generation")
        self.generation = generation if isinstance(generation, int) and not isinstance(generation, bool) else 0
        finalizers = metadata.get("finalizers")
        self.finalizers = [f for f in finalizers if isinstance(f, str)] if isinstance(finalizers, list) else []
        self.status = StatusDraft(mapping(rayjob.get("status")))
        self.commands: list[Command] = []
        self.rules: list[str] = []
        self.wakes: list[datetime] = []
        self.halted = False

    def rule(self, name: str) -> None:
        """Record that a rule of docs/behaviour.md fired."""
        self.rules.append(name)

    def halt(self) -> None:
        """End the pass without the backoff check and the status write (KubeRay's early return)."""
        self.halted = True

    def wake(self, moment: datetime | None) -> None:
        """Ask to be reconciled again at ``moment`` even if nothing changes."""
        if moment is not None:
            self.wakes.append(moment)

    def emit(self, event_type: EventKind, *, reason: str, message: str) -> None:
        """A Kubernetes Event on the RayJob."""
        self.commands.append(EmitEvent(regarding=self.ref, event_type=event_type, reason=reason, message=message))

    def create(self, kind: str, *, api_version: str, name: str, body: dict[str, Any]) -> None:
        """Create an object in the RayJob's namespace (AlreadyExists counts as done)."""
        target = ObjectRef(api_version=api_version, kind=kind, namespace=self.ref.namespace, name=name)
        self.commands.append(CreateObject(target=target, body=body))

    def delete(
        self, kind: str, *, api_version: str, obj: Mapping[str, Any], propagation: Propagation | None = None
    ) -> None:
        """Delete a snapshot object, with its uid as a precondition."""
        metadata = mapping(obj.get("metadata"))
        target = ObjectRef(
            api_version=api_version,
            kind=kind,
            namespace=text(metadata.get("namespace")) or self.ref.namespace,
            name=text(metadata.get("name")),
            uid=text(metadata.get("uid")),
        )
        self.commands.append(DeleteObject(target=target, propagation=propagation))

    def write_status(self) -> None:
        """Append this pass's PatchStatus when KubeRay's write rule says so."""
        patch = self.status.patch(
            target=self.ref, resource_version=self.resource_version, now=self.now, observed_generation=self.generation
        )
        if patch is not None:
            self.commands.append(patch)
            self.rule("5/status-write")

    def _deadlines(self) -> list[datetime | None]:
        """The instants at which the final state's checks would fire (docs/behaviour.md#5.2)."""
        status, spec, switches = self.status, self.spec, self.config.switches
        state = status.deployment
        start = parse_time(status.get("startTime"))
        found: list[datetime | None] = []
        if (
            state in (JOB_DEPLOYMENT_INITIALIZING, JOB_DEPLOYMENT_RUNNING)
            and start is not None
            and spec.active_deadline_seconds is not None
        ):
            found.append(after_seconds(start, spec.active_deadline_seconds))
        if (
            state in (JOB_DEPLOYMENT_INITIALIZING, JOB_DEPLOYMENT_WAITING)
            and start is not None
            and spec.pre_running_deadline_seconds is not None
        ):
            found.append(after_seconds(start, spec.pre_running_deadline_seconds))
        if state == JOB_DEPLOYMENT_RUNNING:
            info = mapping(status.current.get("rayJobInfo"))
            ended = parse_time(info.get("endTime"))
            if status.job_status in TERMINAL_JOB_STATUSES and ended is not None:
                found.append(after_seconds(ended, switches.rayjob_deployment_status_transition_grace_period_seconds))
            failing_since = parse_time(status.get("jobStatusCheckFailureStartTime"))
            if failing_since is not None:
                found.append(after_seconds(failing_since, switches.rayjob_status_check_timeout_seconds))
        return found

    def decision(self) -> Decision:
        """The frozen Decision of this pass."""
        candidates = [m for m in (*self._deadlines(), *self.wakes) if m is not None and m > self.now]
        return Decision(
            commands=tuple(self.commands),
            wake_at=min(candidates) if candidates else None,
            rules=tuple(self.rules),
        )
