"""What happens to a finished RayJob's resources (docs/behaviour.md#5.6): deletion rules, legacy onSuccess/onFailure
policies, ``shutdownAfterJobFinishes`` + TTL, and ``DELETE_RAYJOB_CR_AFTER_JOB_FINISHES``.

Role: given a Complete/Failed RayJob, the snapshot and ``now``, return the deletion commands due now and
the next instant at which another one becomes due (the Decision's wake-up).

Invariants: pure; at most one deletion rule executes per pass (the most impactful overdue one:
DeleteSelf > DeleteCluster > DeleteWorkers > DeleteNone); an action already achieved (cluster gone or
terminating, every worker group suspended) is not re-issued, so quiet passes issue nothing; a
clusterSelector RayJob never deletes anything.

Not here: the state machine that gets a RayJob here, and the RayJob-level ``endTime`` stamping.

Deviation: KubeRay requeues at ``due + 2 s`` to absorb timer skew; raybus wakes exactly at ``due``
because ``now`` is the timer's own due time, so the rule is overdue on that pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from schema.config import OperatorConfig
from schema.messages import Command, DeleteObject, EmitEvent, ObjectRef, PatchObject
from schema.ray.conventions import API_VERSION
from schema.ray.rayjob import JOB_STATUS_FAILED, JOB_STATUS_SUCCEEDED, DeletionRule, JobStatus, RayJobSpec
from schema.times import after_seconds
from services.reconciler.rayjob.cluster import being_deleted, mapping, text

_IMPACT: Final = {"DeleteSelf": 4, "DeleteCluster": 3, "DeleteWorkers": 2, "DeleteNone": 1}


class CleanupPlan:
    """The outcome of one cleanup evaluation."""

    __slots__ = ("commands", "rules", "wake_at")

    def __init__(self) -> None:
        self.commands: list[Command] = []
        self.rules: list[str] = []
        self.wake_at: datetime | None = None

    def wake(self, moment: datetime | None) -> None:
        """Keep the earliest wake-up."""
        if moment is not None and (self.wake_at is None or moment < self.wake_at):
            self.wake_at = moment


def plan_cleanup(
    *,
    rayjob_ref: ObjectRef,
    spec: RayJobSpec,
    status: Mapping[str, Any],
    end_time: datetime,
    cluster: Mapping[str, Any] | None,
    now: datetime,
    config: OperatorConfig,
) -> CleanupPlan:
    """Decide the cleanup of a Complete/Failed RayJob.

    Args:
        rayjob_ref: the RayJob (target of DeleteSelf, subject of Events).
        spec: its spec.
        status: its status (jobStatus / jobDeploymentStatus match the rules).
        end_time: ``status.endTime``.
        cluster: the RayCluster named by ``status.rayClusterName`` in the snapshot, or None if gone.
        now: the pass's time.
        config: gates and switches (RayJobDeletionPolicy, DELETE_RAYJOB_CR_AFTER_JOB_FINISHES).
    """
    plan = CleanupPlan()
    if spec.cluster_selector:
        plan.rules.append("5.6/cluster-selector-keeps-cluster")
        return plan
    strategy = spec.deletion_strategy
    if config.gates.ray_job_deletion_policy and strategy is not None:
        if strategy.deletion_rules is not None:
            _deletion_rules(
                plan,
                rules=strategy.deletion_rules,
                rayjob_ref=rayjob_ref,
                status=status,
                end_time=end_time,
                cluster=cluster,
                now=now,
            )
        else:
            _legacy(plan, spec=spec, rayjob_ref=rayjob_ref, status=status, end_time=end_time, cluster=cluster, now=now)
        return plan
    if spec.shutdown_after_job_finishes:
        due = after_seconds(end_time, spec.ttl_seconds_after_finished)
        if due is not None and now < due:
            plan.rules.append("5.6/shutdown-ttl-pending")
            plan.wake(due)
            return plan
        if config.switches.delete_rayjob_cr_after_job_finishes:
            plan.rules.append("5.6/shutdown-delete-rayjob")
            plan.commands.append(DeleteObject(target=rayjob_ref))
        elif _cluster_gone(cluster):
            plan.rules.append("5.6/shutdown-cluster-already-gone")
        else:
            plan.rules.append("5.6/shutdown-delete-cluster")
            plan.commands.extend(_execute("DeleteCluster", rayjob_ref=rayjob_ref, cluster=cluster))
        return plan
    plan.rules.append("5.6/no-cleanup")
    return plan


def _cluster_gone(cluster: Mapping[str, Any] | None) -> bool:
    return cluster is None or being_deleted(cluster)


def _workers_suspended(cluster: Mapping[str, Any]) -> bool:
    groups = mapping(cluster.get("spec")).get("workerGroupSpecs")
    if not isinstance(groups, list):
        return True
    return all(isinstance(g, Mapping) and g.get("suspend") is True for g in groups)


def _done(policy: str, cluster: Mapping[str, Any] | None) -> bool:
    """KubeRay's ``isDeletionActionCompleted`` over the snapshot."""
    if policy == "DeleteNone":
        return True
    if policy == "DeleteSelf":
        return False
    if _cluster_gone(cluster):
        return True
    if policy == "DeleteCluster":
        return False
    assert cluster is not None
    return _workers_suspended(cluster)


def _matches(rule: DeletionRule, status: Mapping[str, Any]) -> bool:
    condition = rule.condition
    if condition.job_status is not None:
        return condition.job_status == status.get("jobStatus")
    return condition.job_deployment_status == status.get("jobDeploymentStatus")


def _deletion_rules(
    plan: CleanupPlan,
    *,
    rules: tuple[DeletionRule, ...],
    rayjob_ref: ObjectRef,
    status: Mapping[str, Any],
    end_time: datetime,
    cluster: Mapping[str, Any] | None,
    now: datetime,
) -> None:
    overdue: list[DeletionRule] = []
    for rule in rules:
        if not _matches(rule, status):
            continue
        due = after_seconds(end_time, rule.condition.ttl_seconds)
        if due is not None and now < due:
            plan.wake(due)
            continue
        if _done(rule.policy, cluster):
            continue
        overdue.append(rule)
    if not overdue:
        plan.rules.append("5.6/rules-nothing-due")
        return
    chosen = overdue[0]
    for rule in overdue[1:]:
        if _IMPACT[rule.policy] > _IMPACT[chosen.policy]:
            chosen = rule
    plan.rules.append(f"5.6/rules-{chosen.policy}")
    plan.commands.extend(_execute(chosen.policy, rayjob_ref=rayjob_ref, cluster=cluster))


def _legacy(
    plan: CleanupPlan,
    *,
    spec: RayJobSpec,
    rayjob_ref: ObjectRef,
    status: Mapping[str, Any],
    end_time: datetime,
    cluster: Mapping[str, Any] | None,
    now: datetime,
) -> None:
    strategy = spec.deletion_strategy
    assert strategy is not None
    by_outcome = {JOB_STATUS_SUCCEEDED: strategy.on_success, JOB_STATUS_FAILED: strategy.on_failure}
    holder = by_outcome.get(JobStatus(text(status.get("jobStatus"))))
    policy = holder.policy if holder is not None else None
    if policy is None or policy == "DeleteNone":
        plan.rules.append("5.6/legacy-nothing")
        return
    due = after_seconds(end_time, spec.ttl_seconds_after_finished)
    if due is not None and now < due:
        plan.rules.append("5.6/legacy-ttl-pending")
        plan.wake(due)
        return
    if _done(policy, cluster):
        plan.rules.append(f"5.6/legacy-{policy}-done")
        return
    plan.rules.append(f"5.6/legacy-{policy}")
    plan.commands.extend(_execute(policy, rayjob_ref=rayjob_ref, cluster=cluster))


def _cluster_ref(cluster: Mapping[str, Any]) -> ObjectRef:
    metadata = mapping(cluster.get("metadata"))
    return ObjectRef(
        api_version=API_VERSION,
        kind="RayCluster",
        namespace=text(metadata.get("namespace")),
        name=text(metadata.get("name")),
        uid=text(metadata.get("uid")),
    )


def _execute(policy: str, *, rayjob_ref: ObjectRef, cluster: Mapping[str, Any] | None) -> list[Command]:
    """KubeRay's ``executeDeletionPolicy`` as commands (plus its Events)."""
    if policy == "DeleteSelf":
        return [DeleteObject(target=rayjob_ref)]
    if cluster is None or being_deleted(cluster):
        return []
    ref = _cluster_ref(cluster)
    if policy == "DeleteCluster":
        return [
            DeleteObject(target=ref),
            EmitEvent(
                regarding=rayjob_ref,
                event_type="Normal",
                reason="DeletedRayCluster",
                message=f"Deleted cluster {ref.namespace}/{ref.name}",
            ),
        ]
    if policy == "DeleteWorkers":
        groups = mapping(cluster.get("spec")).get("workerGroupSpecs")
        count = len(groups) if isinstance(groups, list) else 0
        if count == 0:
            return []
        patch = [{"op": "add", "path": f"/spec/workerGroupSpecs/{i}/suspend", "value": True} for i in range(count)]
        resource_version = text(mapping(cluster.get("metadata")).get("resourceVersion"))
        return [
            PatchObject(target=ref, patch=patch, patch_type="json", resource_version=resource_version),
            EmitEvent(
                regarding=rayjob_ref,
                event_type="Normal",
                reason="UpdatedRayCluster",
                message=(
                    "Set the `suspend` field to true for all worker groups in cluster " f"{ref.namespace}/{ref.name}"
                ),
            ),
        ]
    return []
