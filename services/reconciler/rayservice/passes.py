"""One RayService reconcile pass: its inputs, the commands being built, the wake-ups it asks for.

Role: the mutable scratchpad of a single ``reconcile`` call (never shared, never module state).
Handlers append commands and rules, move the status draft and may ``halt`` (KubeRay returns early with
an error: the rest of the pass, including the status write, is skipped). :meth:`Pass.decision` turns
it into a frozen :class:`Decision` whose ``wake_at`` is the earliest real deadline asked for.

Invariants: ``wake_at`` is strictly after ``now`` (or None); at most one PutServeConfig per cluster per
pass (a later one, e.g. a target_capacity step right after a submission, replaces the earlier one in
place and keeps its record, so the dashboard ends in the same state as after KubeRay's two PUTs);
command ids are left empty for the worker to fill with content digests (as the RayJob reconcile does).

Not here: the handlers (``reconcile`` and its sibling modules).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from schema.config import OperatorConfig
from schema.decision import Decision, Snapshot
from schema.messages import (
    Command,
    CreateObject,
    DashboardRef,
    DeleteObject,
    EmitEvent,
    EventKind,
    ObjectRef,
    PatchObject,
    PatchType,
    Propagation,
    PutServeConfig,
)
from schema.objects import mapping, text
from schema.ray import conventions
from services.reconciler.common.owners import owner_reference
from services.reconciler.rayservice.model import ServiceModel, incremental_enabled
from services.reconciler.rayservice.status_draft import StatusDraft

API_VERSIONS: dict[str, str] = {
    "RayCluster": conventions.API_VERSION,
    "Service": "v1",
    "Pod": "v1",
    "Gateway": "gateway.networking.k8s.io/v1",
    "HTTPRoute": "gateway.networking.k8s.io/v1",
}


class Pass:
    """Inputs and outputs of one RayService reconcile pass."""

    def __init__(
        self, *, snapshot: Snapshot, model: ServiceModel, ref: ObjectRef, now: datetime, config: OperatorConfig
    ) -> None:
        self.snapshot = snapshot
        self.model = model
        self.ref = ref
        self.now = now
        self.config = config
        self.status = StatusDraft(model.raw_status)
        self.incremental = incremental_enabled(model, config)
        self.commands: list[Command] = []
        self.rules: list[str] = []
        self.wakes: list[datetime] = []
        self.halted = False
        self._serve_puts: dict[str, int] = {}
        self._deleted: set[tuple[str, str]] = set()

    # -- bookkeeping ----------------------------------------------------------------------------------
    def rule(self, name: str) -> None:
        """Record that a rule of docs/behaviour.md fired."""
        self.rules.append(name)

    def halt(self, rule: str) -> None:
        """KubeRay's early return with an error: no further steps and no status write this pass."""
        self.rules.append(rule)
        self.halted = True

    def wake(self, moment: datetime | None) -> None:
        """Ask to be reconciled again at ``moment`` even if nothing changes."""
        if moment is not None:
            self.wakes.append(moment)

    # -- commands -------------------------------------------------------------------------------------
    def target(self, kind: str, name: str, *, uid: str = "") -> ObjectRef:
        """An ObjectRef to an object of ``kind`` in the RayService's namespace."""
        return ObjectRef(
            api_version=API_VERSIONS.get(kind, "v1"), kind=kind, namespace=self.ref.namespace, name=name, uid=uid
        )

    def ref_of(self, kind: str, obj: Mapping[str, Any]) -> ObjectRef:
        """An ObjectRef to a snapshot object (its uid included, so a re-created namesake is safe)."""
        metadata = mapping(obj.get("metadata"))
        api_version = text(obj.get("apiVersion")) or API_VERSIONS.get(kind, "v1")
        return ObjectRef(
            api_version=api_version,
            kind=kind,
            namespace=text(metadata.get("namespace")) or self.ref.namespace,
            name=text(metadata.get("name")),
            uid=text(metadata.get("uid")),
        )

    def emit(self, event_type: EventKind, *, reason: str, message: str) -> None:
        """A Kubernetes Event on the RayService with KubeRay's reason."""
        self.commands.append(EmitEvent(regarding=self.ref, event_type=event_type, reason=reason, message=message))

    def create(self, kind: str, body: dict[str, Any]) -> None:
        """Create ``body`` (deterministic name; AlreadyExists counts as done)."""
        name = text(mapping(body.get("metadata")).get("name"))
        self.commands.append(CreateObject(target=self.target(kind, name), body=body))

    def patch(
        self,
        kind: str,
        obj: Mapping[str, Any],
        *,
        body: dict[str, Any] | list[dict[str, Any]],
        patch_type: PatchType = "merge",
        guarded: bool = True,
    ) -> None:
        """Patch a snapshot object; ``guarded`` sends its resourceVersion (a stale patch is dropped)."""
        resource_version = text(mapping(obj.get("metadata")).get("resourceVersion")) if guarded else ""
        self.commands.append(
            PatchObject(
                target=self.ref_of(kind, obj), patch=body, patch_type=patch_type, resource_version=resource_version
            )
        )

    def delete(self, kind: str, obj: Mapping[str, Any], *, propagation: Propagation | None = None) -> None:
        """Delete a snapshot object, with its uid as a precondition."""
        self.commands.append(DeleteObject(target=self.ref_of(kind, obj), propagation=propagation))

    def owner_reference(self) -> dict[str, Any]:
        """A controller owner reference to the RayService (GC cascades from it)."""
        return owner_reference(self.ref)

    def mark_deleted(self, kind: str, name: str) -> bool:
        """Remember a deletion of this pass; False when the object was already deleted in it."""
        if (kind, name) in self._deleted:
            return False
        self._deleted.add((kind, name))
        return True

    def put_serve_config(
        self, dashboard: DashboardRef, config: dict[str, Any], *, record: PatchObject | None = None
    ) -> None:
        """PUT a Serve config to a cluster's dashboard (replacing this pass's earlier PUT to it, whose
        ``record`` is kept unless a new one is given); ``record`` is applied only if the PUT succeeds."""
        index = self._serve_puts.get(dashboard.cluster)
        if index is None:
            self._serve_puts[dashboard.cluster] = len(self.commands)
            self.commands.append(PutServeConfig(dashboard=dashboard, config=config, record=record))
            return
        earlier = self.commands[index]
        if record is None and isinstance(earlier, PutServeConfig):
            record = earlier.record
        self.commands[index] = PutServeConfig(dashboard=dashboard, config=config, record=record)

    def annotation_patch(self, kind: str, obj: Mapping[str, Any], annotations: dict[str, str]) -> PatchObject:
        """A merge patch of ``annotations`` on a snapshot object (unguarded), not yet part of the pass."""
        return PatchObject(target=self.ref_of(kind, obj), patch={"metadata": {"annotations": annotations}})

    # -- result ---------------------------------------------------------------------------------------
    def decision(self) -> Decision:
        """The frozen Decision of this pass."""
        future = [m for m in self.wakes if m > self.now]
        return Decision(commands=tuple(self.commands), wake_at=min(future) if future else None, rules=tuple(self.rules))
