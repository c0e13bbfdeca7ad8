"""Command construction, and the per-call accumulator of a decision.

Role: every command the RayCluster reconcile emits is built here, with its ``id`` left empty: ids are
``decide``'s (``services/reconciler/worker/decide.py``), the same rule for every kind.

:class:`Plan` collects commands, fired rule ids and the error/wake-up outcome of one reconcile call. It
is created per call and never stored (a reconcile keeps no state between calls).

Not here: what to do (the reconcile modules decide), applying commands (the applier).
"""

from __future__ import annotations

from typing import Any, Final

from schema.messages import (
    Command,
    CreateObject,
    DeleteCollection,
    DeleteObject,
    EmitEvent,
    EventKind,
    ObjectRef,
    PatchObject,
    PatchStatus,
    Propagation,
    Transition,
)
from schema.ray.conventions import API_VERSION

RAY_API_VERSION: Final = API_VERSION

API_VERSIONS: dict[str, str] = {
    "Pod": "v1",
    "Service": "v1",
    "Secret": "v1",
    "ServiceAccount": "v1",
    "PersistentVolumeClaim": "v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "Ingress": "networking.k8s.io/v1",
    "Job": "batch/v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "RayCluster": RAY_API_VERSION,
}


class Plan:
    """The commands and rules of one reconcile call (a local builder, never module state).

    Args:
        owner: the RayCluster as an ObjectRef (events regard it; owner references point to it).
    """

    def __init__(self, *, owner: ObjectRef) -> None:
        self.owner = owner
        self.commands: list[Command] = []
        self.rules: list[str] = []
        self.error: str = ""
        self.requeue_after: float | None = None

    # -- bookkeeping --------------------------------------------------------------------------------
    def rule(self, rule_id: str) -> None:
        """Record that a rule of docs/behaviour.md fired."""
        self.rules.append(rule_id)

    def fail(self, message: str, rule_id: str) -> None:
        """Record a reconcile error (KubeRay returns an error: requeue 2 s, state not ready)."""
        if not self.error:
            self.error = message
        self.rules.append(rule_id)

    def requeue(self, seconds: float) -> None:
        """Ask to be woken after ``seconds`` at the latest."""
        if self.requeue_after is None or seconds < self.requeue_after:
            self.requeue_after = seconds

    # -- commands -----------------------------------------------------------------------------------
    def ref(self, kind: str, name: str, *, uid: str = "") -> ObjectRef:
        """An ObjectRef to an object of ``kind`` in the cluster's namespace."""
        return ObjectRef(
            api_version=API_VERSIONS.get(kind, "v1"),
            kind=kind,
            namespace=self.owner.namespace,
            name=name,
            uid=uid,
        )

    def create(self, kind: str, body: dict[str, Any]) -> None:
        """Create ``body`` (its metadata.name is the deterministic name)."""
        name = str(body.get("metadata", {}).get("name", ""))
        target = self.ref(kind, name)
        self.commands.append(CreateObject(target=target, body=body))

    def delete(self, kind: str, name: str, *, uid: str = "", propagation: Propagation | None = None) -> None:
        """Delete one object (``uid`` becomes a precondition, so a re-created namesake is safe)."""
        target = self.ref(kind, name, uid=uid)
        self.commands.append(DeleteObject(target=target, propagation=propagation))

    def delete_collection(self, kind: str, label_selector: str) -> None:
        """Delete every object of ``kind`` in the namespace matching ``label_selector``."""
        self.commands.append(
            DeleteCollection(
                api_version=API_VERSIONS.get(kind, "v1"),
                kind=kind,
                namespace=self.owner.namespace,
                label_selector=label_selector,
            )
        )

    def patch(
        self,
        target: ObjectRef,
        patch: dict[str, Any],
        *,
        resource_version: str = "",
    ) -> None:
        """Merge-patch an object (a stale ``resource_version`` makes the applier drop it)."""
        self.commands.append(
            PatchObject(
                target=target,
                patch=patch,
                resource_version=resource_version,
            )
        )

    def patch_status(
        self, status: dict[str, Any], *, resource_version: str, transitions: tuple[Transition, ...]
    ) -> None:
        """Merge-patch the RayCluster's status subresource."""
        self.commands.append(
            PatchStatus(
                target=self.owner,
                status=status,
                resource_version=resource_version,
                transitions=transitions,
            )
        )

    def event(self, event_type: EventKind, reason: str, message: str) -> None:
        """Emit a Kubernetes Event on the RayCluster with KubeRay's reason."""
        self.commands.append(
            EmitEvent(
                regarding=self.owner,
                event_type=event_type,
                reason=reason,
                message=message,
            )
        )
