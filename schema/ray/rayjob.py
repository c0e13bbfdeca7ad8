"""RayJob (ray.io/v1): a Ray job with the cluster it runs on (docs/behaviour.md#1.3, #1.4).

Role: the typed view of a RayJob; :class:`RayJobSpec` is also the ``jobTemplate`` of a RayCronJob.

Invariants: ``submissionMode``, ``jobStatus`` and ``jobDeploymentStatus`` are plain strings, as in
KubeRay's CRD (no enum), so an unknown value reaches the reconciler's validation (docs/behaviour.md#8) instead of
failing to decode; the known values are the constants below. Deletion-rule enums and the CEL rules
of ``deletionStrategy`` are KubeRay's.

Not here: the job state machine (``services/reconciler/rayjob``).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, NewType

import msgspec
from msgspec import Meta

from schema.ray.common import (
    Int32,
    Int64,
    ManagedBy,
    PodTemplateSpec,
    RayStruct,
    StringMap,
    Time,
    crd_default,
)
from schema.ray.conventions import API_VERSION
from schema.ray.raycluster import RayClusterSpec, RayClusterStatus

K8S_JOB_MODE: Final = "K8sJobMode"
HTTP_MODE: Final = "HTTPMode"
INTERACTIVE_MODE: Final = "InteractiveMode"
SIDECAR_MODE: Final = "SidecarMode"
SUBMISSION_MODES: Final = (K8S_JOB_MODE, HTTP_MODE, INTERACTIVE_MODE, SIDECAR_MODE)

DeletionPolicyType = Literal["DeleteCluster", "DeleteWorkers", "DeleteSelf", "DeleteNone"]


class SubmitterConfig(RayStruct, frozen=True, kw_only=True):
    """Settings of the submitter (K8s Job backoffLimit, or sidecar restarts)."""

    backoff_limit: Annotated[Int32 | None, Meta(description="Operator default: 2.")] = None


class DeletionPolicy(RayStruct, frozen=True, kw_only=True):
    """Legacy ``onSuccess`` / ``onFailure`` policy."""

    policy: DeletionPolicyType | None = None


class DeletionCondition(RayStruct, frozen=True, kw_only=True):
    """When a deletion rule fires: a terminal job status or deployment status, plus a delay."""

    job_status: Literal["SUCCEEDED", "FAILED"] | None = None
    job_deployment_status: Literal["Failed"] | None = None
    ttl_seconds: Annotated[Int32, Meta(ge=0), crd_default(0)] = 0


_CONDITION_RULES: Final = [
    {
        "rule": "!(has(self.jobStatus) && has(self.jobDeploymentStatus))",
        "message": "JobStatus and JobDeploymentStatus cannot be used together within the same deletion condition.",
    },
    {
        "rule": "has(self.jobStatus) || has(self.jobDeploymentStatus)",
        "message": "the deletion condition requires either the JobStatus or the JobDeploymentStatus field.",
    },
]


class DeletionRule(RayStruct, frozen=True, kw_only=True):
    """One step of the deletion policy: what to delete, and when."""

    policy: DeletionPolicyType
    condition: Annotated[DeletionCondition, Meta(extra_json_schema={"x-kubernetes-validations": _CONDITION_RULES})]


_STRATEGY_RULES: Final = [
    {
        "rule": "!((has(self.onSuccess) || has(self.onFailure)) && has(self.deletionRules))",
        "message": (
            "legacy policies (onSuccess/onFailure) and deletionRules cannot be used together "
            "within the same deletionStrategy"
        ),
    },
    {
        "rule": "((has(self.onSuccess) && has(self.onFailure)) || has(self.deletionRules))",
        "message": (
            "deletionStrategy requires either BOTH onSuccess and onFailure, OR the deletionRules field "
            "(cannot be empty)"
        ),
    },
]


class DeletionStrategy(RayStruct, frozen=True, kw_only=True):
    """What to delete after the job ends: legacy per-outcome policies, or ordered rules."""

    on_success: DeletionPolicy | None = None
    on_failure: DeletionPolicy | None = None
    deletion_rules: (
        Annotated[tuple[DeletionRule, ...], Meta(min_length=1, extra_json_schema={"x-kubernetes-list-type": "atomic"})]
        | None
    ) = None


class RayJobSpec(RayStruct, frozen=True, kw_only=True):
    """The desired Ray job: what to run, on which cluster, and what happens afterwards."""

    active_deadline_seconds: Annotated[Int32 | None, Meta(description="Measured from status.startTime.")] = None
    backoff_limit: Annotated[Int32, crd_default(0), Meta(description="Retries; each one builds a new RayCluster.")] = 0
    ray_cluster_spec: RayClusterSpec | None = None
    submitter_pod_template: PodTemplateSpec | None = None
    metadata: StringMap | None = None
    cluster_selector: Annotated[
        StringMap | None, Meta(description="ray.io/cluster: name of an existing RayCluster to use.")
    ] = None
    submitter_config: SubmitterConfig | None = None
    managed_by: ManagedBy | None = None
    deletion_strategy: Annotated[
        DeletionStrategy | None, Meta(extra_json_schema={"x-kubernetes-validations": _STRATEGY_RULES})
    ] = None
    entrypoint: str = ""
    runtime_env_yaml: Annotated[str, Meta(description="Runtime environment as a YAML document.")] = msgspec.field(
        default="", name="runtimeEnvYAML"
    )
    job_id: str = ""
    submission_mode: Annotated[
        str, crd_default(K8S_JOB_MODE), Meta(description="K8sJobMode, HTTPMode, InteractiveMode or SidecarMode.")
    ] = K8S_JOB_MODE
    entrypoint_resources: Annotated[str, Meta(description="JSON object of custom resources.")] = ""
    entrypoint_num_cpus: float = 0.0
    entrypoint_num_gpus: float = 0.0
    ttl_seconds_after_finished: Annotated[Int32, crd_default(0)] = 0
    shutdown_after_job_finishes: bool = False
    suspend: bool = False
    pre_running_deadline_seconds: Annotated[Int32, Meta(ge=1)] | None = None


JobDeploymentStatus = NewType("JobDeploymentStatus", str)
"""``status.jobDeploymentStatus``: where the operator is with the job (docs/behaviour.md#1.4); "" is New.
A status is written only through these constants, so a misspelt state fails the type check."""
JOB_DEPLOYMENT_NEW: Final = JobDeploymentStatus("")
JOB_DEPLOYMENT_INITIALIZING: Final = JobDeploymentStatus("Initializing")
JOB_DEPLOYMENT_RUNNING: Final = JobDeploymentStatus("Running")
JOB_DEPLOYMENT_COMPLETE: Final = JobDeploymentStatus("Complete")
JOB_DEPLOYMENT_FAILED: Final = JobDeploymentStatus("Failed")
JOB_DEPLOYMENT_VALIDATION_FAILED: Final = JobDeploymentStatus("ValidationFailed")
JOB_DEPLOYMENT_SUSPENDING: Final = JobDeploymentStatus("Suspending")
JOB_DEPLOYMENT_SUSPENDED: Final = JobDeploymentStatus("Suspended")
JOB_DEPLOYMENT_RETRYING: Final = JobDeploymentStatus("Retrying")
JOB_DEPLOYMENT_WAITING: Final = JobDeploymentStatus("Waiting")

JobStatus = NewType("JobStatus", str)
"""``status.jobStatus``: the Ray job's status as Ray reports it (docs/behaviour.md#1.4): "" (New), PENDING,
RUNNING, or one of the terminal states below, which are the ones the operator acts on."""
JOB_STATUS_NEW: Final = JobStatus("")
JOB_STATUS_STOPPED: Final = JobStatus("STOPPED")
JOB_STATUS_SUCCEEDED: Final = JobStatus("SUCCEEDED")
JOB_STATUS_FAILED: Final = JobStatus("FAILED")


class RayJobInfo(RayStruct, frozen=True, kw_only=True):
    """Start and end of the job as Ray reports them (converted from epoch milliseconds)."""

    start_time: Time | None = None
    end_time: Time | None = None


class RayJobStatus(RayStruct, frozen=True, kw_only=True):
    """What the operator observed about the job and its cluster."""

    ray_job_info: Annotated[RayJobInfo | None, Meta(description="Times reported by Ray.")] = None
    job_id: str = ""
    ray_cluster_name: str = ""
    dashboard_url: Annotated[str, Meta(description="host:port of the dashboard, no scheme.")] = msgspec.field(
        default="", name="dashboardURL"
    )
    job_status: str = ""
    job_deployment_status: str = ""
    reason: str = ""
    message: str = ""
    start_time: Time | None = None
    end_time: Time | None = None
    job_status_check_failure_start_time: Time | None = None
    succeeded: Annotated[Int32, crd_default(0)] = 0
    failed: Annotated[Int32, crd_default(0)] = 0
    ray_cluster_status: RayClusterStatus | None = None
    observed_generation: Int64 = 0


class RayJob(RayStruct, frozen=True, kw_only=True, omit_defaults=False):
    """A Ray job and the RayCluster it runs on, from submission to cleanup (ray.io/v1).

    In Python, ``apiVersion``, ``kind``, ``metadata`` and ``status`` are always encoded.
    """

    api_version: str = API_VERSION
    kind: str = "RayJob"
    metadata: dict[str, Any] = {}
    spec: RayJobSpec
    status: RayJobStatus = RayJobStatus()
