"""The Running state of a RayJob (docs/behaviour.md#5.2 Running, #5.3 submitter checks, #5.4 job info).

Role: ``run(job)`` performs KubeRay's Running checks in order: suspend, activeDeadlineSeconds, the
transition grace period, the status-check timeout, the cluster and ``<rj>-head-svc``, the submitter
(K8sJobMode Job conditions / SidecarMode container), the 30 s submitter-finished grace, then the
dashboard's answer for the job, which arrives as an ``obs-rayjob`` observation instead of a GET.

Invariants: pure; each wait is either an event the watcher delivers (observation changed, Job or Pod
changed) or a wake-up registered on the pass; no fixed-interval requeue, except the HTTPMode submit
retry while the dashboard still answers 404 for a job raybus just submitted.

Deviations: the 30 s submitter-finished grace waits for the prober's answer about the job and yields to
a terminal one (see ``_submitter_finished_timeout``); a job the dashboard does not know is failed only
once that grace is over (see ``_observe``); a missing submitter Job is created again (see
``_check_submitter``).

Not here: the other states (``reconcile``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from schema.decision import OBS_RAY_JOB
from schema.messages import ObjectRef, PatchObject, SubmitRayJob
from schema.probes import snapshot_dashboard
from schema.ray import conventions
from schema.ray.rayjob import (
    HTTP_MODE,
    JOB_DEPLOYMENT_COMPLETE,
    JOB_DEPLOYMENT_FAILED,
    JOB_STATUS_FAILED,
    JOB_STATUS_SUCCEEDED,
    K8S_JOB_MODE,
    SIDECAR_MODE,
    JobStatus,
)
from schema.times import after_seconds, format_time, from_epoch_millis, parse_time
from services.reconciler.rayjob.cluster import (
    head_pod,
    mapping,
    rayjob_head_service,
    text,
)
from services.reconciler.rayjob.names import SUBMITTER_CONTAINER, head_service_name_for_rayjob
from services.reconciler.rayjob.passes import Pass
from services.reconciler.rayjob.status import TERMINAL_JOB_STATUSES
from services.reconciler.rayjob.steps import create_submitter_job, get_or_create_cluster, preflight
from services.reconciler.rayjob.submitter import SubmitterError, build_submit_request

SUBMITTER_FINISHED_TIMEOUT: Final = 30.0
"""Seconds after the submitter finished within which Ray must report a terminal job status."""
HTTP_SUBMIT_RETRY_DELAY: Final = 3.0
"""While the dashboard answers 404 after an HTTPMode submission, try again after this delay (the only
fixed delay: it ends as soon as the prober reports the job)."""


def run(job: Pass) -> None:
    """One pass of the Running state; see the module docstring for the order of checks."""
    if preflight(job, pre_running=False):
        return
    if _grace_period_exceeded(job) or _status_check_timed_out(job):
        return
    cluster = get_or_create_cluster(job)
    if cluster is None:
        return
    if not job.spec.cluster_selector:
        _reconcile_head_service(job)
    finished_at: datetime | None = None
    if job.spec.submission_mode in (K8S_JOB_MODE, SIDECAR_MODE):
        checked = _check_submitter(job, cluster)
        if checked is None:
            return
        submitter_failed, finished_at = checked
        if finished_at is not None:
            job.wake(_grace_end(finished_at))
        if _submitter_finished_timeout(job, finished_at) or submitter_failed:
            return
    _observe(job, cluster=cluster, finished_at=finished_at)


def _grace_period_exceeded(job: Pass) -> bool:
    """jobStatus terminal but still Running for longer than the grace period after Ray's endTime."""
    status = job.status
    if status.job_status not in TERMINAL_JOB_STATUSES:
        return False
    ended = parse_time(mapping(status.current.get("rayJobInfo")).get("endTime"))
    if ended is None:
        return False
    due = after_seconds(ended, job.config.switches.rayjob_deployment_status_transition_grace_period_seconds)
    if due is None or job.now < due:
        return False
    message = (
        "JobDeploymentStatus does not transition to Complete or Failed within the grace period after "
        "JobStatus reaches a terminal state."
    )
    reason = "JobDeploymentStatusTransitionGracePeriodExceeded"
    status.move(
        JOB_DEPLOYMENT_FAILED if status.job_status == JOB_STATUS_FAILED else JOB_DEPLOYMENT_COMPLETE,
        reason=reason,
        message=message,
    )
    status.set("reason", reason)
    status.set("message", message)
    job.rule("5.2/transition-grace-period-exceeded")
    return True


def _status_check_timed_out(job: Pass) -> bool:
    """The dashboard has failed to answer for longer than RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS."""
    since = parse_time(job.status.get("jobStatusCheckFailureStartTime"))
    if since is None:
        return False
    timeout = job.config.switches.rayjob_status_check_timeout_seconds
    due = after_seconds(since, timeout)
    if due is None or job.now < due:
        return False
    job.status.fail(
        "JobStatusCheckTimeoutExceeded",
        f"Failed to get the Ray job status from the dashboard since {format_time(since)} "
        f"(RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS={timeout:g})",
    )
    job.rule("5.2/status-check-timeout-exceeded")
    return True


def _reconcile_head_service(job: Pass) -> None:
    """``<rj>-head-svc``: created once; re-pointed only when the selected cluster changes."""
    cluster_name = job.status.get("rayClusterName")
    wanted = rayjob_head_service(job.rayjob, job.spec, cluster_name=cluster_name, config=job.config)
    if wanted is None:
        return
    name = head_service_name_for_rayjob(job.ref.name)
    existing = job.snapshot.get("Service", name)
    if existing is None:
        job.create("Service", api_version="v1", name=name, body=wanted)
        job.emit("Normal", reason="CreatedService", message=f"Created the service {job.ref.namespace}/{name}")
        job.rule("5.2/create-head-service")
        return
    existing_spec = mapping(existing.get("spec"))
    if mapping(existing_spec.get("selector")).get(conventions.LABEL_CLUSTER) == cluster_name:
        return
    patch = [
        {"op": "replace", "path": "/spec/selector", "value": wanted["spec"]["selector"]},
        {"op": "replace", "path": "/spec/ports", "value": wanted["spec"].get("ports", [])},
    ]
    target_meta = mapping(existing.get("metadata"))
    target = ObjectRef(
        api_version="v1", kind="Service", namespace=job.ref.namespace, name=name, uid=text(target_meta.get("uid"))
    )
    job.commands.append(
        PatchObject(
            target=target, patch=patch, patch_type="json", resource_version=text(target_meta.get("resourceVersion"))
        )
    )
    job.emit("Normal", reason="UpdatedService", message=f"Updated the service {job.ref.namespace}/{name}")
    job.rule("5.2/update-head-service")


def _true_condition(obj: Mapping[str, Any], kinds: tuple[str, ...]) -> Mapping[str, Any] | None:
    conditions = mapping(obj.get("status")).get("conditions")
    if isinstance(conditions, list):
        for condition in conditions:
            if isinstance(condition, Mapping) and condition.get("type") in kinds and condition.get("status") == "True":
                return condition
    return None


def _check_submitter(job: Pass, cluster: Mapping[str, Any]) -> tuple[bool, datetime | None] | None:
    """``checkSubmitterAndUpdateStatusIfNeeded``: (submitter failed, finishedAt), or None to stop the pass.

    Deviation: a K8sJobMode submitter Job that is missing is created again (KubeRay returns an error here
    and waits for it forever). Its create may have been refused or lost after the status already moved to
    Running; the submitter submits only a job its id does not name yet, so a second one follows the first
    job's logs instead of running it twice."""
    status = job.status
    if job.spec.submission_mode == K8S_JOB_MODE:
        submitter = job.snapshot.get("Job", job.ref.name)
        if submitter is None:
            create_submitter_job(job, cluster, rule="5.3/submitter-job-missing")
            job.halt()
            return None
        failed_condition = _true_condition(submitter, ("Failed",))
        finished = _true_condition(submitter, ("Complete", "Failed"))
        finished_at = parse_time(finished.get("lastTransitionTime")) if finished is not None else None
        if failed_condition is None:
            return False, finished_at
        if status.job_status == JOB_STATUS_FAILED:
            status.fail("AppFailed", status.get("message"))
        else:
            status.fail(
                "SubmissionFailed",
                f"Job submission has failed. Reason: {text(failed_condition.get('reason'))}. "
                f"Message: {text(failed_condition.get('message'))}",
            )
        job.rule("5.3/submitter-job-failed")
        return True, finished_at
    pod = head_pod(job.snapshot, status.get("rayClusterName"))
    if pod is None:
        status.fail("AppFailed", "Ray head pod not found.")
        job.rule("5.3/sidecar-head-pod-missing")
        return True, None
    container = _submitter_container_status(pod)
    terminated = mapping(mapping(container.get("state")).get("terminated")) if container else {}
    finished_at = parse_time(terminated.get("finishedAt")) if terminated else None
    exit_code = terminated.get("exitCode")
    if job.config.gates.sidecar_submitter_restart:
        limit = 2
        restarts = container.get("restartCount") if container else 0
        restarts = restarts if isinstance(restarts, int) else 0
        ever_terminated = bool(mapping(mapping(container.get("lastState")).get("terminated"))) or bool(terminated)
        failed = restarts >= limit and ever_terminated and not (terminated and exit_code == 0)
        detail = f"restarted {restarts} times"
    else:
        failed = bool(terminated) and exit_code != 0
        detail = f"terminated with exit code {exit_code}: {text(terminated.get('reason'))}"
    if not failed:
        return False, finished_at
    if status.job_status == JOB_STATUS_FAILED:
        status.fail("AppFailed", status.get("message"))
    else:
        status.fail("SubmissionFailed", f"Ray head pod container {SUBMITTER_CONTAINER} {detail}")
    job.rule("5.3/sidecar-submitter-failed")
    return True, finished_at


def sidecar_submitter_terminated(job: Pass) -> bool:
    """SidecarMode only: the head pod's ``ray-job-submitter`` container has terminated (any exit code)."""
    if job.spec.submission_mode != SIDECAR_MODE:
        return False
    pod = head_pod(job.snapshot, job.status.get("rayClusterName"))
    container = _submitter_container_status(pod) if pod is not None else {}
    return bool(mapping(mapping(container.get("state")).get("terminated")))


def _submitter_container_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    statuses = mapping(pod.get("status")).get("containerStatuses")
    if isinstance(statuses, list):
        for container in statuses:
            if isinstance(container, Mapping) and container.get("name") == SUBMITTER_CONTAINER:
                return container
    return {}


def _dashboard_answer(job: Pass) -> Mapping[str, Any] | None:
    """The prober's latest report of the dashboard's answer (or error) about the current job id."""
    job_id = job.status.get("jobId")
    return job.snapshot.get(OBS_RAY_JOB, job_id) if job_id else None


def _grace_end(finished_at: datetime) -> datetime:
    """When the submitter-finished grace is over: until then Ray's answer about the job may still change."""
    return finished_at + timedelta(seconds=SUBMITTER_FINISHED_TIMEOUT)


def _submitter_finished_timeout(job: Pass, finished_at: datetime | None) -> bool:
    """The submitter finished more than 30 s ago and Ray still reports the job not terminal → Failed.

    Deviation: KubeRay asks the dashboard in the very pass that the submitter's end triggers; raybus
    learns the answer from the prober, which may lag behind under load. So the rule waits for an answer
    (without one, "Ray never ended the job" and "not asked yet" look the same), and a terminal answer
    that arrives late is taken (Ray did end the job) instead of being overridden.
    """
    if finished_at is None or job.now < _grace_end(finished_at):
        return False
    answer = _dashboard_answer(job)
    if answer is None:
        job.rule("5.3/submitter-finished-awaiting-dashboard")
        return False
    if answer.get("status") in TERMINAL_JOB_STATUSES or answer.get("http_status") == 404:
        return False  # a terminal answer is taken; a job Ray does not know is ``_observe``'s to fail
    reason = "JobDeploymentStatusTransitionGracePeriodExceeded"
    job.status.set_job_status(JOB_STATUS_FAILED, reason=reason)
    job.status.fail(
        reason,
        f"The RayJob submitter finished at {finished_at.strftime('%Y-%m-%d %H:%M:%S')} but the ray job did not "
        f"reach terminal state within {SUBMITTER_FINISHED_TIMEOUT:g}s",
    )
    job.rule("5.3/submitter-finished-timeout")
    return True


def _start_failure_timer(job: Pass, rule: str) -> None:
    if not job.status.get("jobStatusCheckFailureStartTime"):
        job.status.set("jobStatusCheckFailureStartTime", format_time(job.now))
    job.rule(rule)


def _observe(job: Pass, *, cluster: Mapping[str, Any], finished_at: datetime | None) -> None:
    """React to the dashboard's latest answer about the job (``obs-rayjob`` entry named by the job id).

    Deviation: KubeRay fails the RayJob (``AppFailed``) when the dashboard does not know the job in the
    pass that sees the submitter finished. raybus's 404 is the prober's last *changed* answer, which may
    predate the submission: a short job is submitted and over between two polls, and the submitter Job's
    end reaches reconcile before the prober's next answer. So "not found" fails the RayJob only when it
    still stands once the 30 s submitter-finished grace is over (the wake-up ``run`` registered).
    """
    status, spec = job.status, job.spec
    job_id = status.get("jobId")
    observation = job.snapshot.get(OBS_RAY_JOB, job_id) if job_id else None
    if observation is None:
        job.rule("5.4/await-observation")
        return
    http_status = observation.get("http_status")
    if http_status == 404:
        if spec.submission_mode == HTTP_MODE:
            try:
                request = build_submit_request(spec, job_id=job_id)
            except SubmitterError:
                _start_failure_timer(job, "5.3/http-submit-request-invalid")
                return
            dashboard = snapshot_dashboard(job.snapshot, cluster_name=status.get("rayClusterName"), cluster=cluster)
            job.commands.append(SubmitRayJob(dashboard=dashboard, request=request))
            job.wake(job.now + timedelta(seconds=HTTP_SUBMIT_RETRY_DELAY))
            job.rule("5.3/http-submit")
            return
        if finished_at is not None:
            if job.now < _grace_end(finished_at):
                job.rule("5.4/job-not-found-after-submitter-awaiting-dashboard")
                return
            status.fail("AppFailed", "Submitter completed but Ray job not found in RayCluster.")
            job.rule("5.4/job-not-found-after-submitter")
            return
        job.rule("5.4/job-not-found-yet")
        return
    ray_status = observation.get("status")
    if (
        observation.get("error") is not None
        or (isinstance(http_status, int) and http_status >= 400)
        or not isinstance(ray_status, str)
    ):
        _start_failure_timer(job, "5.4/dashboard-error")
        return
    status.set("jobStatusCheckFailureStartTime", None)
    terminal = ray_status in TERMINAL_JOB_STATUSES
    if spec.submission_mode in (K8S_JOB_MODE, SIDECAR_MODE):
        terminal = terminal and finished_at is not None
    message = text(observation.get("message"))
    status.set("rayClusterStatus", dict(mapping(cluster.get("status"))))
    status.set_job_status(JobStatus(ray_status), reason="DashboardReported", message=message)
    info = dict(mapping(status.current.get("rayJobInfo")))
    started, ended = from_epoch_millis(observation.get("start_time")), from_epoch_millis(observation.get("end_time"))
    if started is not None:
        info["startTime"] = format_time(started)
    if ended is not None:
        info["endTime"] = format_time(ended)
    status.set("rayJobInfo", info or None)
    if terminal and ray_status == JOB_STATUS_FAILED:
        status.move(JOB_DEPLOYMENT_FAILED, reason="AppFailed", message=message)
        status.set("reason", "AppFailed")
        job.rule("5.4/job-failed")
    elif terminal:
        status.move(
            JOB_DEPLOYMENT_COMPLETE,
            reason="JobSucceeded" if ray_status == JOB_STATUS_SUCCEEDED else "JobStopped",
            message=message,
        )
        status.set("reason", None)
        job.rule("5.4/job-complete")
    else:
        status.set("reason", None)
        job.rule("5.4/job-running")
    status.set("message", message)
