"""Command construction with deterministic ids, and the per-call accumulator of a decision.

Role: every command the RayCluster reconcile emits is built here, so its ``id`` is always the same
function of the same inputs: a digest of the snapshot revision, the RayCluster's resourceVersion, the
verb, the target and a step label. Replaying a snapshot reproduces the ids; two decisions on different
snapshots never share one (so an applier that de-duplicates by id cannot swallow a legitimate re-create
of a pod whose name was reused).

:class:`Plan` collects commands, fired rule ids and the error/wake-up outcome of one reconcile call. It
is created per call and never stored (a reconcile keeps no state between calls).

Not here: what to do (the reconcile modules decide), applying commands (the applier).
"""

from __future__ import annotations

import hashlib
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


def command_id(*parts: str) -> str:
    """A short stable digest of ``parts``."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]


class Plan:
    """The commands and rules of one reconcile call (a local builder, never module state).

    Args:
        owner: the RayCluster as an ObjectRef (events regard it; owner references point to it).
        salt: what makes ids unique per snapshot (snapshot revision and RayCluster resourceVersion).
    """

    def __init__(self, *, owner: ObjectRef, salt: str) -> None:
        self.owner = owner
        self.salt = salt
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

    def _id(self, verb: str, target: str, step: str) -> str:
        return command_id(self.salt, verb, target, step, str(len(self.commands)))

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

    def create(self, kind: str, body: dict[str, Any], *, step: str) -> None:
        """Create ``body`` (its metadata.name is the deterministic name)."""
        name = str(body.get("metadata", {}).get("name", ""))
        target = self.ref(kind, name)
        self.commands.append(CreateObject(id=self._id("create", f"{kind}/{name}", step), target=target, body=body))

    def delete(self, kind: str, name: str, *, uid: str = "", step: str, propagation: Propagation | None = None) -> None:
        """Delete one object (``uid`` becomes a precondition, so a re-created namesake is safe)."""
        target = self.ref(kind, name, uid=uid)
        self.commands.append(
            DeleteObject(id=self._id("delete", f"{kind}/{name}", step), target=target, propagation=propagation)
        )

    def delete_collection(self, kind: str, label_selector: str, *, step: str) -> None:
        """Delete every object of ``kind`` in the namespace matching ``label_selector``."""
        self.commands.append(
            DeleteCollection(
                id=self._id("delete_collection", f"{kind}?{label_selector}", step),
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
        step: str,
        resource_version: str = "",
    ) -> None:
        """Merge-patch an object (a stale ``resource_version`` makes the applier drop it)."""
        self.commands.append(
            PatchObject(
                id=self._id("patch", f"{target.kind}/{target.name}", step),
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
                id=self._id("patch_status", f"RayCluster/{self.owner.name}", "status"),
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
                id=self._id("event", reason, message),
                regarding=self.owner,
                event_type=event_type,
                reason=reason,
                message=message,
            )
        )
