"""Checks and steps shared by several RayJob states (docs/behaviour.md#5.2): the suspend/deadline preflight that opens
Initializing and Running, the preRunningDeadlineSeconds check, get-or-create of the RayCluster,
and Initializing's and Running's create of the K8sJobMode submitter Job.

Role: helpers over a :class:`~services.reconciler.rayjob.passes.Pass`; each records the rule it applied.

Invariants: pure; a check that fires moves the status draft and returns True; deadlines fire when
``now >= startTime + seconds`` (the same instant ``Pass.decision`` asks to be woken at).

Not here: the state dispatch (``reconcile``), Running's own checks (``running``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schema.ray.conventions import API_VERSION
from schema.ray.rayjob import JOB_DEPLOYMENT_SUSPENDING
from schema.times import after_seconds, go_time_string, parse_time
from services.reconciler.common.owners import owner_reference_to
from services.reconciler.rayjob.cluster import build_cluster, mapping
from services.reconciler.rayjob.passes import Pass
from services.reconciler.rayjob.submitter import SubmitterError, build_submitter_job


def preflight(job: Pass, *, pre_running: bool) -> bool:
    """The checks that open Initializing/Running: suspend, activeDeadlineSeconds, preRunningDeadlineSeconds.

    Returns:
        True when the status moved (the pass goes straight to the status write).
    """
    status, spec = job.status, job.spec
    if spec.suspend:
        status.move(JOB_DEPLOYMENT_SUSPENDING, reason="SuspendRequested", message="spec.suspend is true")
        job.rule("5.2/suspend")
        return True
    start = parse_time(status.get("startTime"))
    if start is not None and spec.active_deadline_seconds is not None:
        due = after_seconds(start, spec.active_deadline_seconds)
        if due is not None and job.now >= due:
            status.fail(
                "DeadlineExceeded",
                f"The RayJob has passed the activeDeadlineSeconds. StartTime: {go_time_string(start)}. "
                f"ActiveDeadlineSeconds: {spec.active_deadline_seconds}",
            )
            job.rule("5.2/active-deadline-exceeded")
            return True
    return pre_running and pre_running_deadline_passed(job)


def pre_running_deadline_passed(job: Pass) -> bool:
    """preRunningDeadlineSeconds since startTime has passed → Failed/PreRunningDeadlineExceeded."""
    status, spec = job.status, job.spec
    start = parse_time(status.get("startTime"))
    if start is None or spec.pre_running_deadline_seconds is None:
        return False
    due = after_seconds(start, spec.pre_running_deadline_seconds)
    if due is None or job.now < due:
        return False
    status.fail(
        "PreRunningDeadlineExceeded",
        f"The RayJob did not reach Running within preRunningDeadlineSeconds. StartTime: {go_time_string(start)}. "
        f"PreRunningDeadlineSeconds: {spec.pre_running_deadline_seconds}",
    )
    job.rule("5.2/pre-running-deadline-exceeded")
    return True


def get_or_create_cluster(job: Pass) -> Mapping[str, Any] | None:
    """The RayCluster named in the status; created (and returned as built) when missing.

    Returns None when the pass must stop (clusterSelector cluster missing, or the body cannot be built).
    """
    name = job.status.get("rayClusterName")
    cluster = job.snapshot.get("RayCluster", name)
    if cluster is not None:
        return cluster
    if job.spec.cluster_selector:
        job.emit(
            "Warning",
            reason="RayClusterNotFound",
            message=f"RayCluster {job.ref.namespace}/{name} set in the clusterSelector is not found. "
            "It must be created manually",
        )
        job.rule("5.2/cluster-selector-not-found")
        job.halt()
        return None
    try:
        body = build_cluster(
            job.rayjob,
            job.spec,
            cluster_name=name,
            job_id=job.status.get("jobId"),
            dashboard_url=job.status.get("dashboardURL"),
            config=job.config,
        )
    except SubmitterError as exc:
        job.emit(
            "Warning",
            reason="FailedToCreateRayCluster",
            message=f"Failed to create RayCluster {job.ref.namespace}/{name}: {exc}",
        )
        job.rule("5.2/cluster-build-failed")
        job.halt()
        return None
    job.create("RayCluster", api_version=API_VERSION, name=name, body=body)
    job.emit("Normal", reason="CreatedRayCluster", message=f"Created RayCluster {job.ref.namespace}/{name}")
    job.rule("5.2/create-cluster")
    return body


def create_submitter_job(job: Pass, cluster: Mapping[str, Any], *, rule: str) -> bool:
    """Create the K8sJobMode submitter Job ``<rj>`` for ``cluster`` (the caller saw none), recording ``rule``.

    Returns:
        False when it cannot be built (Warning Event ``FailedToCreateRayJobSubmitter``; the pass halts).
    """
    status = job.status
    try:
        body = build_submitter_job(
            job.rayjob,
            job.spec,
            raw_spec=job.raw_spec,
            job_id=status.get("jobId"),
            dashboard_url=status.get("dashboardURL"),
            cluster_name=status.get("rayClusterName"),
            cluster_spec=mapping(cluster.get("spec")),
            owner_reference=owner_reference_to(job.rayjob, "RayJob"),
            config=job.config,
        )
    except SubmitterError as exc:
        job.emit(
            "Warning",
            reason="FailedToCreateRayJobSubmitter",
            message=f"Failed to create new Kubernetes Job {job.ref.namespace}/{job.ref.name}: {exc}",
        )
        job.rule("5.3/submitter-build-failed")
        job.halt()
        return False
    job.create("Job", api_version="batch/v1", name=job.ref.name, body=body)
    job.emit(
        "Normal",
        reason="CreatedRayJobSubmitter",
        message=f"Created Kubernetes Job {job.ref.namespace}/{job.ref.name}",
    )
    job.rule(rule)
    return True
