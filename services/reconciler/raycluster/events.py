"""Kubernetes Events of the RayCluster controller: KubeRay's reasons and raybus's message texts.

Role: every Event the RayCluster reconcile emits is spelled here (reason constant + message builder),
so ``kubectl describe raycluster`` reads like KubeRay's and the texts live in one place.

Invariants: reasons are KubeRay's exact strings (docs/behaviour.md#4.2); messages name the object as
``<ns>/<name>``. Warnings are only used where KubeRay warns.

Not here: emitting (``commands.Plan.event``).
"""

from __future__ import annotations

from typing import Final

from services.reconciler.raycluster.commands import Plan

CREATED_HEAD_POD: Final = "CreatedHeadPod"
DELETED_HEAD_POD: Final = "DeletedHeadPod"
CREATED_WORKER_POD: Final = "CreatedWorkerPod"
DELETED_WORKER_POD: Final = "DeletedWorkerPod"
DELETED_POD: Final = "DeletedPod"
CREATED_SERVICE: Final = "CreatedService"
CREATED_INGRESS: Final = "CreatedIngress"
UPDATED_INGRESS: Final = "UpdatedIngress"
FAILED_TO_CREATE_INGRESS: Final = "FailedToCreateIngress"
CREATED_SERVICE_ACCOUNT: Final = "CreatedServiceAccount"
CREATED_ROLE: Final = "CreatedRole"
CREATED_ROLE_BINDING: Final = "CreatedRoleBinding"
INVALID_SPEC: Final = "InvalidRayClusterSpec"
INVALID_METADATA: Final = "InvalidRayClusterMetadata"
INVALID_STATUS: Final = "InvalidRayClusterStatus"


def created_head_pod(plan: Plan, name: str) -> None:
    """After creating the head pod."""
    plan.event("Normal", CREATED_HEAD_POD, f"Created head Pod {plan.owner.namespace}/{name}")


def deleted_head_pod(plan: Plan, name: str, reason: str) -> None:
    """After deleting a head pod that ``shouldDeletePod`` condemned."""
    plan.event("Normal", DELETED_HEAD_POD, f"Deleted head Pod {plan.owner.namespace}/{name}; {reason}")


def created_worker_pod(plan: Plan, name: str) -> None:
    """After creating a worker pod."""
    plan.event("Normal", CREATED_WORKER_POD, f"Created worker Pod {plan.owner.namespace}/{name}")


def deleted_worker_pod(plan: Plan, name: str, why: str) -> None:
    """After deleting a worker pod (``why``: condemned, workersToDelete, scale-down, replica group)."""
    plan.event("Normal", DELETED_WORKER_POD, f"Deleted worker Pod {plan.owner.namespace}/{name}; {why}")


def deleted_all_pods(plan: Plan, why: str) -> None:
    """After a delete-collection of the cluster's (or a group's) pods."""
    plan.event("Normal", DELETED_POD, f"Deleted Pods of RayCluster {plan.owner.namespace}/{plan.owner.name} {why}")


def created_object(plan: Plan, reason: str, kind: str, name: str) -> None:
    """After creating a Service, Ingress, ServiceAccount, Role, RoleBinding, Secret or PVC."""
    plan.event("Normal", reason, f"Created {kind} {plan.owner.namespace}/{name}")


def invalid(plan: Plan, reason: str, message: str) -> None:
    """A validation failure (spec, metadata or status): a Warning with the validator's message."""
    plan.event("Warning", reason, message)
