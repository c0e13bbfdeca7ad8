"""The pure RayJob reconcile (docs/behaviour.md#5): prelude, the JobDeploymentStatus state machine, backoff, status.

Role: ``reconcile(snapshot, now, config) -> Decision`` for key ``RayJob/<ns>/<rj>``. Entries read:
``RayJob`` (the CR), ``RayCluster`` (the one it created or the one its clusterSelector names),
``Service`` (``<rj>-head-svc`` and the cluster's head Service), ``Job`` (the submitter ``<rj>``),
``Pod`` (submitter pods, the head pod in SidecarMode) and ``obs-rayjob`` observations (entry name = the
Ray job id; data = the dashboard's ``GET /api/jobs/<id>`` body, or ``{"http_status": 404}``, or
``{"error": ..., "http_status": N}``).

Prober contract (``schema.probes``): the watcher's prober polls the job of every RayJob whose
``status.jobDeploymentStatus`` is ``Running``, and publishes an observation only when the answer
changed. Every other wait here is woken by an event (cluster ready, Service projected, objects deleted,
spec edited) or by ``Decision.wake_at`` (deadlines, grace periods, the status-check timeout, TTLs):
nothing polls. A Running RayJob whose observations do not change wakes up only at its deadlines.

Invariants: pure and deterministic (the cluster name and job id come from ``names.rand5`` over the
RayJob uid, the attempt counters and the generation); at most one PatchStatus per pass, carrying the
RayJob's resourceVersion and the Transitions of the pass.

Deviation: a SidecarMode RayJob whose submitter container ended before its RayCluster was seen ``ready``
leaves Initializing anyway (see ``_initializing``); KubeRay would wait there forever.

Not here: the Running state's checks (``running``), cleanup after the end (``cleanup``), builders
(``cluster``, ``submitter``), validation (``validation``), status write rule (``status``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from schema.config import OperatorConfig
from schema.decision import Decision, Snapshot
from schema.messages import EmitEvent, ObjectRef, PatchObject, PatchStatus, StopRayJob
from schema.probes import snapshot_dashboard
from schema.ray import conventions
from schema.ray.conventions import API_VERSION
from schema.ray.rayjob import (
    INTERACTIVE_MODE,
    JOB_DEPLOYMENT_COMPLETE,
    JOB_DEPLOYMENT_FAILED,
    JOB_DEPLOYMENT_INITIALIZING,
    JOB_DEPLOYMENT_NEW,
    JOB_DEPLOYMENT_RETRYING,
    JOB_DEPLOYMENT_RUNNING,
    JOB_DEPLOYMENT_SUSPENDED,
    JOB_DEPLOYMENT_SUSPENDING,
    JOB_DEPLOYMENT_VALIDATION_FAILED,
    JOB_DEPLOYMENT_WAITING,
    JOB_STATUS_NEW,
    JOB_STATUS_SUCCEEDED,
    K8S_JOB_MODE,
)
from schema.times import format_time, parse_time
from services.reconciler.common.patches import add_finalizer_patch, remove_finalizer_patch
from services.reconciler.common.prelude import owner_to_reconcile
from services.reconciler.rayjob import running
from services.reconciler.rayjob.cleanup import plan_cleanup
from services.reconciler.rayjob.cluster import (
    being_deleted,
    dashboard_url,
    mapping,
    text,
)
from services.reconciler.rayjob.names import attempt_suffix
from services.reconciler.rayjob.passes import Pass
from services.reconciler.rayjob.status import TERMINAL_DEPLOYMENT_STATUSES, TERMINAL_JOB_STATUSES, StatusDraft
from services.reconciler.rayjob.steps import (
    create_submitter_job,
    get_or_create_cluster,
    pre_running_deadline_passed,
    preflight,
)
from services.reconciler.rayjob.validation import validate_rayjob


def reconcile(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    """Decide what one RayJob (key ``RayJob/<ns>/<rj>``) needs now (``ReconcileFn``)."""
    rayjob = owner_to_reconcile(snapshot, "5.1")
    if isinstance(rayjob, Decision):
        return rayjob
    metadata = mapping(rayjob.get("metadata"))
    ref = ObjectRef(
        api_version=API_VERSION,
        kind="RayJob",
        namespace=snapshot.key.namespace,
        name=snapshot.key.name,
        uid=text(metadata.get("uid")),
    )
    if metadata.get("deletionTimestamp"):
        return _on_deletion(snapshot, rayjob, ref)
    spec, invalid = validate_rayjob(rayjob, config=config)
    if invalid is not None or spec is None:
        assert invalid is not None
        return _on_invalid(rayjob, ref, reason=invalid.reason, message=invalid.message, now=now)
    job = Pass(snapshot=snapshot, rayjob=rayjob, spec=spec, ref=ref, now=now, config=config)
    deployment = job.status.deployment
    if deployment == "":
        if conventions.FINALIZER_RAYJOB not in job.finalizers:
            patch = PatchObject(
                target=ref,
                patch=add_finalizer_patch(job.finalizers, conventions.FINALIZER_RAYJOB),
                patch_type="json",
                resource_version=job.resource_version,
            )
            return Decision(commands=(patch,), rules=("5.2/new-add-finalizer",))
        _new(job)
    elif deployment == JOB_DEPLOYMENT_INITIALIZING:
        _initializing(job)
    elif deployment == JOB_DEPLOYMENT_WAITING:
        _waiting(job)
    elif deployment == JOB_DEPLOYMENT_RUNNING:
        running.run(job)
    elif deployment in (JOB_DEPLOYMENT_SUSPENDING, JOB_DEPLOYMENT_RETRYING):
        _release(job)
    elif deployment == JOB_DEPLOYMENT_SUSPENDED:
        _suspended(job)
    elif deployment in TERMINAL_DEPLOYMENT_STATUSES:
        return _finished(job)
    else:
        return Decision(rules=(f"5.2/no-handler-{deployment}",))
    if not job.halted:
        _check_backoff_limit(job)
        job.write_status()
    return job.decision()


def _on_deletion(snapshot: Snapshot, rayjob: Mapping[str, Any], ref: ObjectRef) -> Decision:
    """docs/behaviour.md#5.1 step 3: stop a non-terminal job on its dashboard, then drop the finalizer."""
    metadata = mapping(rayjob.get("metadata"))
    finalizers = [f for f in metadata.get("finalizers") or [] if isinstance(f, str)]
    if conventions.FINALIZER_RAYJOB not in finalizers:
        return Decision(rules=("5.1/deleting-no-finalizer",))
    status = mapping(rayjob.get("status"))
    commands: list[Any] = []
    rules: list[str] = []
    job_id, cluster_name = text(status.get("jobId")), text(status.get("rayClusterName"))
    if text(status.get("jobStatus")) not in TERMINAL_JOB_STATUSES and job_id and cluster_name:
        cluster = snapshot.get("RayCluster", cluster_name)
        dashboard = snapshot_dashboard(snapshot, cluster_name=cluster_name, cluster=cluster)
        commands.append(StopRayJob(dashboard=dashboard, job_id=job_id))
        rules.append("5.1/deleting-stop-job")
    commands.append(
        PatchObject(
            target=ref,
            patch=remove_finalizer_patch(finalizers, conventions.FINALIZER_RAYJOB),
            patch_type="json",
            resource_version=text(metadata.get("resourceVersion")),
        )
    )
    rules.append("5.1/deleting-remove-finalizer")
    return Decision(commands=tuple(commands), rules=tuple(rules))


def _on_invalid(rayjob: Mapping[str, Any], ref: ObjectRef, *, reason: str, message: str, now: datetime) -> Decision:
    """docs/behaviour.md#5.1 step 4: Warning event, ``ValidationFailed``, no requeue."""
    metadata = mapping(rayjob.get("metadata"))
    status = mapping(rayjob.get("status"))
    commands: list[Any] = []
    already = status.get("jobDeploymentStatus") == JOB_DEPLOYMENT_VALIDATION_FAILED
    if not (already and status.get("message") == message):
        # KubeRay re-emits on every pass; raybus skips the repeat its own status write would trigger.
        commands.append(
            EmitEvent(
                regarding=ref,
                event_type="Warning",
                reason=reason,
                message=f"{ref.namespace}/{ref.name}: {message}",
            )
        )
    if not already:
        draft = StatusDraft(status)
        draft.move(JOB_DEPLOYMENT_VALIDATION_FAILED, reason="ValidationFailed", message=message)
        draft.set("reason", "ValidationFailed")
        draft.set("message", message)
        generation = metadata.get("generation")
        patch = draft.patch(
            target=ref,
            resource_version=text(metadata.get("resourceVersion")),
            now=now,
            observed_generation=generation if isinstance(generation, int) else 0,
        )
        if patch is not None:
            commands.append(patch)
    return Decision(commands=tuple(commands), rules=("8/rayjob-invalid",))


def _attempt(job: Pass) -> str:
    """Identity of this attempt: finished attempts so far and the spec generation (fresh after a retry
    or a resume, identical on a replay of the same snapshot)."""
    return f"{job.status.count('failed') + job.status.count('succeeded')}/{job.generation}"


def _new(job: Pass) -> None:
    """New: initialise jobId, rayClusterName, jobStatus, startTime → Initializing."""
    status, spec = job.status, job.spec
    attempt = _attempt(job)
    if spec.submission_mode != INTERACTIVE_MODE and not status.get("jobId"):
        job_id = spec.job_id or f"{job.ref.name}-{attempt_suffix(uid=job.ref.uid, purpose='job', attempt=attempt)}"
        status.set("jobId", job_id)
    if not status.get("rayClusterName"):
        selected = (spec.cluster_selector or {}).get(conventions.LABEL_CLUSTER, "")
        cluster_name = (
            selected or f"{job.ref.name}-{attempt_suffix(uid=job.ref.uid, purpose='cluster', attempt=attempt)}"
        )
        status.set("rayClusterName", cluster_name)
    status.move(
        JOB_DEPLOYMENT_INITIALIZING,
        reason="RayJobInitialized",
        message="Initialized the job id and the RayCluster name",
    )
    status.set("startTime", format_time(job.now))
    job.rule("5.2/new-initialize")


def _initializing(job: Pass) -> None:
    status, spec = job.status, job.spec
    if preflight(job, pre_running=True):
        return
    cluster = get_or_create_cluster(job)
    if cluster is None:
        return
    if not status.get("dashboardURL"):
        cluster_status = mapping(cluster.get("status"))
        if cluster_status.get("state") != "ready":
            if not running.sidecar_submitter_terminated(job):
                status.set("rayClusterStatus", dict(cluster_status))
                job.rule("5.2/wait-cluster-ready")
                return
            # Deviation: KubeRay waits for `ready` here forever once the SidecarMode submitter ended
            # before the cluster was seen ready (the head pod is never Ready again). Its job was
            # submitted on a working head, so Running's submitter and job checks decide instead.
            job.rule("5.2/sidecar-ended-before-cluster-ready")
        url = dashboard_url(
            job.snapshot,
            namespace=job.ref.namespace,
            cluster_name=status.get("rayClusterName"),
            cluster=cluster,
            config=job.config,
        )
        if url is None:
            job.rule("5.2/wait-head-service")
            job.halt()
            return
        status.set("dashboardURL", url)
    if spec.submission_mode == INTERACTIVE_MODE:
        status.move(JOB_DEPLOYMENT_WAITING, reason="ClusterReady", message="waiting for spec.jobId (InteractiveMode)")
        job.rule("5.2/interactive-waiting")
        return
    submitter_missing = spec.submission_mode == K8S_JOB_MODE and job.snapshot.get("Job", job.ref.name) is None
    if submitter_missing and not create_submitter_job(job, cluster, rule="5.3/create-submitter-job"):
        return
    status.move(
        JOB_DEPLOYMENT_RUNNING, reason="ClusterReady", message=f"RayCluster {status.get('rayClusterName')} is ready"
    )
    job.rule("5.2/initializing-to-running")


def _waiting(job: Pass) -> None:
    if pre_running_deadline_passed(job):
        return
    if not job.spec.job_id:
        job.rule("5.2/waiting-for-job-id")
        return
    job.status.set("jobId", job.spec.job_id)
    job.status.move(JOB_DEPLOYMENT_RUNNING, reason="JobIdSet", message="spec.jobId was set (InteractiveMode)")
    job.rule("5.2/waiting-to-running")


def _release(job: Pass) -> None:
    """Suspending / Retrying: delete the cluster and the submitter, wait until both are gone, reset."""
    status, spec = job.status, job.spec
    released = True
    if not spec.cluster_selector:
        name = status.get("rayClusterName")
        cluster = job.snapshot.get("RayCluster", name) if name else None
        if cluster is not None:
            released = False
            if not being_deleted(cluster):
                job.delete("RayCluster", api_version=API_VERSION, obj=cluster)
                job.emit("Normal", reason="DeletedRayCluster", message=f"Deleted cluster {job.ref.namespace}/{name}")
                job.rule("5.2/release-delete-cluster")
    if spec.submission_mode in (K8S_JOB_MODE, INTERACTIVE_MODE):
        submitter = job.snapshot.get("Job", job.ref.name)
        if submitter is not None:
            released = False
            if not being_deleted(submitter):
                job.delete("Job", api_version="batch/v1", obj=submitter, propagation="Background")
                job.emit(
                    "Normal",
                    reason="DeletedRayJobSubmitter",
                    message=f"Deleted submitter K8s Job {job.ref.namespace}/{job.ref.name}",
                )
                job.rule("5.2/release-delete-submitter")
    if not released:
        job.rule("5.2/release-wait")
        job.halt()
        return
    for field in ("rayClusterStatus", "rayClusterName", "dashboardURL", "jobId", "message", "reason", "rayJobInfo"):
        status.set(field, None)
    status.set("jobStatusCheckFailureStartTime", None)
    status.set_job_status(JOB_STATUS_NEW)
    if status.deployment == JOB_DEPLOYMENT_SUSPENDING:
        status.move(
            JOB_DEPLOYMENT_SUSPENDED, reason="ResourcesReleased", message="the RayCluster and the submitter are gone"
        )
        job.rule("5.2/suspended")
    else:
        status.move(JOB_DEPLOYMENT_NEW, reason="Retry", message="retrying with a new RayCluster and job id")
        job.rule("5.2/retry-new")


def _suspended(job: Pass) -> None:
    if job.spec.suspend:
        job.rule("5.2/stay-suspended")
        return
    job.status.set_job_status(JOB_STATUS_NEW)
    job.status.move(JOB_DEPLOYMENT_NEW, reason="Resumed", message="spec.suspend is false")
    job.rule("5.2/resume")


def _check_backoff_limit(job: Pass) -> None:
    """docs/behaviour.md#5.5: count the attempt that just ended; Failed and attempts left → Retrying."""
    status, spec = job.status, job.spec
    failed, succeeded = status.count("failed"), status.count("succeeded")
    if status.deployment == JOB_DEPLOYMENT_FAILED:
        failed += 1
    if status.deployment == JOB_DEPLOYMENT_COMPLETE and status.job_status == JOB_STATUS_SUCCEEDED:
        succeeded += 1
    status.set("failed", failed)
    status.set("succeeded", succeeded)
    if (
        status.deployment == JOB_DEPLOYMENT_FAILED
        and failed < spec.backoff_limit + 1
        and status.get("reason") not in ("DeadlineExceeded", "JobStatusCheckTimeoutExceeded")
    ):
        status.move(
            JOB_DEPLOYMENT_RETRYING,
            reason="BackoffLimitNotReached",
            message=f"attempt {failed} of {spec.backoff_limit + 1} failed",
        )
        job.rule("5.5/retrying")


def _finished(job: Pass) -> Decision:
    """Complete / Failed: cleanup (docs/behaviour.md#5.6); no backoff check, no status write."""
    status = job.status
    end_time = parse_time(status.get("endTime"))
    if end_time is None:
        # A terminal RayJob always has endTime in KubeRay; raybus repairs one that lost it so the
        # TTLs below have a fixed origin instead of moving with every pass.
        patch = PatchStatus(
            target=job.ref, status={"endTime": format_time(job.now)}, resource_version=job.resource_version
        )
        return Decision(commands=(patch,), rules=("5.6/repair-end-time",))
    cluster_name = status.get("rayClusterName")
    cluster = job.snapshot.get("RayCluster", cluster_name) if cluster_name else None
    plan = plan_cleanup(
        rayjob_ref=job.ref,
        spec=job.spec,
        status=status.current,
        end_time=end_time,
        cluster=cluster,
        now=job.now,
        config=job.config,
    )
    return Decision(commands=tuple(plan.commands), wake_at=plan.wake_at, rules=tuple(plan.rules))
