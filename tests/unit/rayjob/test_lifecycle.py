"""RayJob state machine paths (docs/behaviour.md#5.2-#5.5), driven through the pure simulation."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest

from schema.config import FeatureGates, OperatorConfig
from schema.messages import CreateObject, DeleteObject, PatchObject, PatchStatus, StopRayJob, SubmitRayJob
from services.reconciler.rayjob import reconcile
from tests.unit.rayjob.builders import (
    finish_submitter,
    job_info,
    make_cluster_ready,
    rayjob,
    status_of,
    terminate_sidecar,
)
from tests.unit.rayjob.sim import NOW, World, stamp


def step(world: World, name: str = "rj") -> Any:
    return world.reconcile(reconcile, "RayJob", name)


def created(world: World, kind: str) -> list[CreateObject]:
    return [c for d in world.decisions for c in d.commands if isinstance(c, CreateObject) and c.target.kind == kind]


def deployment_transitions(world: World) -> list[tuple[str, str, str]]:
    return [
        (t.from_value, t.to_value, t.reason)
        for d in world.decisions
        for t in d.transitions()
        if t.field == "jobDeploymentStatus"
    ]


def start_to_running(world: World, name: str = "rj", **spec: Any) -> tuple[str, str]:
    """Create the RayJob and drive it to Running (cluster ready, submitter created)."""
    world.add(rayjob(name, finalizer=False, **spec))
    decision = step(world, name)
    assert decision.rules == ("5.2/new-add-finalizer",)
    assert world.existing("RayJob", name)["metadata"]["finalizers"] == ["ray.io/rayjob-finalizer"]
    step(world, name)
    status = status_of(world, name)
    assert status["jobDeploymentStatus"] == "Initializing"
    cluster, job_id = status["rayClusterName"], status.get("jobId", "")
    step(world, name)
    assert world.get("RayCluster", cluster) is not None
    make_cluster_ready(world, cluster)
    step(world, name)
    assert status_of(world, name)["jobDeploymentStatus"] in ("Running", "Waiting")
    return cluster, job_id


def test_success_k8s_job_mode() -> None:
    world = World()
    cluster, job_id = start_to_running(world)
    assert cluster.startswith("rj-") and len(cluster) == 8
    assert job_id.startswith("rj-") and job_id != cluster
    status = status_of(world)
    assert status["dashboardURL"] == f"{cluster}-head-svc.default.svc.cluster.local:8265"
    assert status["startTime"] == stamp(NOW)
    submitter = world.get("Job", "rj")
    assert submitter is not None
    assert submitter["spec"]["backoffLimit"] == 2
    assert submitter["metadata"]["labels"] == {
        "ray.io/originated-from-cr-name": "rj",
        "ray.io/originated-from-crd": "RayJob",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    # Running: the RayJob's own head Service appears; no observation yet → quiet, no timer.
    decision = step(world)
    assert world.existing("Service", "rj-head-svc")["spec"]["selector"]["ray.io/cluster"] == cluster
    quiet = step(world)
    assert quiet.commands == () and quiet.wake_at is None
    assert "5.4/await-observation" in quiet.rules
    world.advance(5)
    world.observations[job_id] = job_info(job_id, "RUNNING")
    decision = step(world)
    assert status_of(world)["jobStatus"] == "RUNNING"
    (patch,) = [c for c in decision.commands if isinstance(c, PatchStatus)]
    assert [(t.field, t.from_value, t.to_value) for t in patch.transitions] == [("jobStatus", "", "RUNNING")]
    assert patch.transitions[0].attributes == {"rayClusterName": cluster, "jobId": job_id}
    # Nothing changes: no reconcile wants a wake-up (KubeRay would requeue every 3 s).
    again = step(world)
    assert again.commands == () and again.wake_at is None
    # Ray reports SUCCEEDED, but the submitter has not finished yet → still Running, grace timer.
    end_ms = int((world.now + timedelta(seconds=10)).timestamp() * 1000)
    world.advance(10)
    world.observations[job_id] = job_info(job_id, "SUCCEEDED", end_ms=end_ms)
    decision = step(world)
    assert status_of(world)["jobDeploymentStatus"] == "Running"
    assert decision.wake_at == world.now + timedelta(seconds=300)
    finish_submitter(world, "rj", succeeded=True)
    decision = step(world)
    status = status_of(world)
    assert status["jobDeploymentStatus"] == "Complete"
    assert status["jobStatus"] == "SUCCEEDED"
    assert status["endTime"] == stamp(world.now)
    assert status["succeeded"] == 1 and status["failed"] == 0
    assert status["rayJobInfo"]["endTime"] == stamp(world.now)
    assert ("Running", "Complete", "JobSucceeded") in deployment_transitions(world)
    final = step(world)
    assert final.commands == () and final.wake_at is None


def test_a_missing_submitter_job_is_created_again() -> None:
    """A submitter Job refused or lost after the status moved to Running (or deleted) is created again;
    the RayJob does not wait for it forever."""
    world = World()
    world.add(rayjob(finalizer=False))
    step(world)
    step(world)
    cluster = status_of(world)["rayClusterName"]
    step(world)
    make_cluster_ready(world, cluster)
    decision = reconcile(world.snapshot("RayJob", "rj"), world.now, world.config)
    first = [c for c in decision.commands if isinstance(c, CreateObject) and c.target.kind == "Job"]
    assert first and "5.3/create-submitter-job" in decision.rules
    world.apply(msgspec.structs.replace(decision, commands=tuple(c for c in decision.commands if c not in first)))
    assert status_of(world)["jobDeploymentStatus"] == "Running" and world.get("Job", "rj") is None
    again = step(world)
    assert "5.3/submitter-job-missing" in again.rules
    assert [c.body for c in created(world, "Job")] == [first[0].body]
    assert status_of(world)["jobDeploymentStatus"] == "Running"
    world.remove("Job", "rj")  # deleted by hand while Running
    step(world)
    assert world.get("Job", "rj") is not None
    assert step(world).rules.count("5.3/submitter-job-missing") == 0


def test_application_failure_retries_with_fresh_clusters() -> None:
    world = World()
    clusters: list[str] = []
    job_ids: list[str] = []
    cluster, job_id = start_to_running(world, backoffLimit=2)
    for attempt in range(3):
        clusters.append(cluster)
        job_ids.append(job_id)
        step(world)
        world.observations[job_id] = job_info(job_id, "FAILED", end_ms=1714564900000, message="boom")
        finish_submitter(world, "rj", succeeded=True)
        step(world)
        status = status_of(world)
        assert status["failed"] == attempt + 1
        if attempt == 2:
            break
        assert status["jobDeploymentStatus"] == "Retrying"
        release = step(world)
        deleted = {(c.target.kind, c.target.name) for c in release.commands if isinstance(c, DeleteObject)}
        assert deleted == {("RayCluster", cluster), ("Job", "rj")}
        step(world)
        assert status_of(world).get("jobDeploymentStatus", "") == ""
        assert "rayClusterName" not in status_of(world)
        step(world)
        status = status_of(world)
        assert status["jobDeploymentStatus"] == "Initializing"
        cluster, job_id = status["rayClusterName"], status["jobId"]
        step(world)
        make_cluster_ready(world, cluster)
        step(world)
    status = status_of(world)
    assert status["jobDeploymentStatus"] == "Failed"
    assert status["reason"] == "AppFailed"
    assert status["failed"] == 3 and status["succeeded"] == 0
    assert len(set(clusters)) == 3 and len(set(job_ids)) == 3
    assert [c.target.name for c in created(world, "RayCluster")] == clusters
    # ``<rj>-head-svc`` was created once and re-pointed at each new cluster.
    assert len(created(world, "Service")) == 1
    assert world.existing("Service", "rj-head-svc")["spec"]["selector"]["ray.io/cluster"] == clusters[-1]
    updates = [e for e in world.events if e.reason == "UpdatedService"]
    assert len(updates) == 2
    steps = deployment_transitions(world)
    assert steps.count(("Running", "Failed", "AppFailed")) == 3
    assert steps.count(("Failed", "Retrying", "BackoffLimitNotReached")) == 2


def test_submission_failure() -> None:
    world = World()
    start_to_running(world)
    step(world)
    finish_submitter(world, "rj", succeeded=False)
    decision = step(world)
    status = status_of(world)
    assert status["jobDeploymentStatus"] == "Failed"
    assert status["reason"] == "SubmissionFailed"
    assert status["message"] == (
        "Job submission has failed. Reason: BackoffLimitExceeded. Message: Job has reached the specified backoff limit"
    )
    assert "5.3/submitter-job-failed" in decision.rules


def test_submitter_completed_but_job_not_found() -> None:
    """Deviation: the 404 may be the prober's answer from before the submission, so "not found" fails the
    RayJob only when it still stands once the 30 s submitter-finished grace is over."""
    world = World()
    _, job_id = start_to_running(world)
    step(world)
    world.observations[job_id] = {"http_status": 404}
    finish_submitter(world, "rj", succeeded=True)
    decision = step(world)
    assert "5.4/job-not-found-after-submitter-awaiting-dashboard" in decision.rules
    assert status_of(world)["jobDeploymentStatus"] == "Running"
    assert decision.wake_at == world.now + timedelta(seconds=30)
    world.advance_to(decision.wake_at)
    decision = step(world)
    status = status_of(world)
    assert (status["jobDeploymentStatus"], status["reason"]) == ("Failed", "AppFailed")
    assert status["message"] == "Submitter completed but Ray job not found in RayCluster."
    assert "5.4/job-not-found-after-submitter" in decision.rules


def test_a_job_not_found_before_the_submitter_finished_is_taken_when_the_prober_sees_it() -> None:
    """A short job submitted and over between two polls: the submitter's end comes first, the prober's
    answer a moment later, and the RayJob completes."""
    world = World()
    _, job_id = start_to_running(world)
    world.observations[job_id] = {"http_status": 404}
    step(world)
    finish_submitter(world, "rj", succeeded=True)
    step(world)
    assert status_of(world)["jobDeploymentStatus"] == "Running"
    world.observations[job_id] = job_info(job_id, "SUCCEEDED", end_ms=1714564900000)
    step(world)
    status = status_of(world)
    assert (status["jobDeploymentStatus"], status["jobStatus"]) == ("Complete", "SUCCEEDED")


def test_submitter_finished_but_job_never_terminal() -> None:
    world = World()
    _, job_id = start_to_running(world)
    world.observations[job_id] = job_info(job_id, "RUNNING")
    step(world)
    finish_submitter(world, "rj", succeeded=True)
    decision = step(world)
    assert status_of(world)["jobDeploymentStatus"] == "Running"
    assert decision.wake_at == world.now + timedelta(seconds=30)
    world.advance_to(decision.wake_at)
    step(world)
    status = status_of(world)
    assert (status["jobDeploymentStatus"], status["jobStatus"]) == ("Failed", "FAILED")
    assert status["reason"] == "JobDeploymentStatusTransitionGracePeriodExceeded"


def test_submitter_finished_before_the_dashboard_was_heard_from() -> None:
    """Deviation: the prober has not answered about the job yet (it lags under load), so 30 s after the
    submitter's end raybus does not know that Ray never ended it: it waits for the answer instead."""
    world = World()
    _, job_id = start_to_running(world)
    step(world)
    finish_submitter(world, "rj", succeeded=True)
    decision = step(world)
    assert decision.wake_at == world.now + timedelta(seconds=30)
    world.advance_to(decision.wake_at)
    decision = step(world)
    assert "5.3/submitter-finished-awaiting-dashboard" in decision.rules
    assert decision.commands == () and decision.wake_at is None  # the answer's arrival is the next event
    assert status_of(world)["jobDeploymentStatus"] == "Running"
    world.observations[job_id] = job_info(job_id, "SUCCEEDED", end_ms=1714564900000)
    step(world)
    status = status_of(world)
    assert (status["jobDeploymentStatus"], status["jobStatus"]) == ("Complete", "SUCCEEDED")


def test_active_deadline_is_a_timer_and_is_not_retried() -> None:
    world = World()
    _, job_id = start_to_running(world, activeDeadlineSeconds=60, backoffLimit=3)
    world.observations[job_id] = job_info(job_id, "RUNNING")
    decision = step(world)
    assert decision.wake_at == NOW + timedelta(seconds=60)
    world.advance_to(NOW + timedelta(seconds=59))
    assert step(world).wake_at == NOW + timedelta(seconds=60)
    world.advance_to(NOW + timedelta(seconds=60))
    step(world)
    status = status_of(world)
    assert (status["jobDeploymentStatus"], status["reason"]) == ("Failed", "DeadlineExceeded")
    assert status["message"] == (
        "The RayJob has passed the activeDeadlineSeconds. StartTime: 2024-05-01 12:00:00 +0000 UTC. "
        "ActiveDeadlineSeconds: 60"
    )
    assert status["failed"] == 1


def test_pre_running_deadline_is_retried() -> None:
    world = World()
    world.add(rayjob(preRunningDeadlineSeconds=30, backoffLimit=1))
    step(world)
    decision = step(world)  # creates the cluster, which never becomes ready
    assert decision.wake_at == NOW + timedelta(seconds=30)
    world.advance(30)
    step(world)
    status = status_of(world)
    assert status["failed"] == 1
    assert status["jobDeploymentStatus"] == "Retrying"
    assert ("Initializing", "Failed", "PreRunningDeadlineExceeded") in deployment_transitions(world)


def test_suspend_and_resume() -> None:
    world = World()
    first_cluster, _ = start_to_running(world, shutdownAfterJobFinishes=True)
    world.update("RayJob", "rj", lambda o: (o["spec"].update(suspend=True), o["metadata"].update(generation=2)))
    step(world)
    assert status_of(world)["jobDeploymentStatus"] == "Suspending"
    decision = step(world)
    assert {(c.target.kind, c.target.name) for c in decision.commands if isinstance(c, DeleteObject)} == {
        ("RayCluster", first_cluster),
        ("Job", "rj"),
    }
    step(world)
    status = status_of(world)
    assert status["jobDeploymentStatus"] == "Suspended"
    assert "rayClusterName" not in status and "jobId" not in status and "dashboardURL" not in status
    idle = step(world)
    assert idle.commands == () and idle.wake_at is None
    world.update("RayJob", "rj", lambda o: (o["spec"].update(suspend=False), o["metadata"].update(generation=3)))
    step(world)
    assert status_of(world).get("jobDeploymentStatus", "") == ""
    step(world)
    status = status_of(world)
    assert status["jobDeploymentStatus"] == "Initializing"
    assert status["rayClusterName"] != first_cluster


def test_interactive_mode_waits_for_job_id() -> None:
    world = World()
    start_to_running(world, submissionMode="InteractiveMode")
    status = status_of(world)
    assert status["jobDeploymentStatus"] == "Waiting"
    assert "jobId" not in status
    assert world.get("Job", "rj") is None
    waiting = step(world)
    assert waiting.commands == () and waiting.wake_at is None
    world.update("RayJob", "rj", lambda o: o["spec"].update(jobId="my-interactive-job"))
    step(world)
    status = status_of(world)
    assert (status["jobDeploymentStatus"], status["jobId"]) == ("Running", "my-interactive-job")


def test_sidecar_mode() -> None:
    world = World()
    cluster, job_id = start_to_running(world, submissionMode="SidecarMode")
    body = world.existing("RayCluster", cluster)
    assert body["metadata"]["annotations"]["ray.io/disable-provisioned-head-restart"] == "true"
    assert body["metadata"]["labels"]["ray.io/job-submission-mode"] == "SidecarMode"
    head = body["spec"]["headGroupSpec"]["template"]["spec"]
    assert head["restartPolicy"] == "Never"
    sidecar = head["containers"][-1]
    assert sidecar["name"] == "ray-job-submitter"
    assert sidecar["command"] == ["/bin/bash", "-ce", "--"]
    assert "ray job submit --address http://127.0.0.1:8265 --runtime-env-json" not in sidecar["args"][0]
    assert f"--submission-id {job_id}" in sidecar["args"][0]
    assert "--no-wait" not in sidecar["args"][0]
    assert world.get("Job", "rj") is None
    world.observations[job_id] = job_info(job_id, "SUCCEEDED", end_ms=1714564900000)
    step(world)
    assert status_of(world)["jobDeploymentStatus"] == "Running"
    terminate_sidecar(world, cluster, exit_code=0, reason="Completed")
    step(world)
    assert status_of(world)["jobDeploymentStatus"] == "Complete"


def test_sidecar_submitter_ending_before_the_cluster_was_seen_ready() -> None:
    """Deviation: the sidecar ran its job to the end before the RayCluster was ever seen ``ready`` (a
    terminated container keeps the head pod unready for good). KubeRay would wait in Initializing
    forever; raybus goes on to Running, whose submitter and job checks decide."""
    world = World()
    world.add(rayjob("rj", finalizer=False, submissionMode="SidecarMode"))
    step(world)
    step(world)
    status = status_of(world)
    cluster, job_id = status["rayClusterName"], status["jobId"]
    step(world)
    make_cluster_ready(world, cluster)
    world.set_status("RayCluster", cluster, {"state": None})  # the head pod was never seen Ready
    assert "5.2/wait-cluster-ready" in step(world).rules
    terminate_sidecar(world, cluster, exit_code=0, reason="Completed")
    decision = step(world)
    assert "5.2/sidecar-ended-before-cluster-ready" in decision.rules
    status = status_of(world)
    assert status["jobDeploymentStatus"] == "Running"
    assert status["dashboardURL"] == f"{cluster}-head-svc.default.svc.cluster.local:8265"
    world.observations[job_id] = job_info(job_id, "SUCCEEDED", end_ms=1714564900000)
    step(world)
    assert (status_of(world)["jobDeploymentStatus"], status_of(world)["jobStatus"]) == ("Complete", "SUCCEEDED")


def test_a_running_sidecar_does_not_skip_the_wait_for_a_ready_cluster() -> None:
    world = World()
    world.add(rayjob("rj", finalizer=False, submissionMode="SidecarMode"))
    step(world)
    step(world)
    cluster = status_of(world)["rayClusterName"]
    step(world)
    make_cluster_ready(world, cluster)
    world.set_status("RayCluster", cluster, {"state": None})
    assert "5.2/wait-cluster-ready" in step(world).rules
    assert status_of(world)["jobDeploymentStatus"] == "Initializing"


def test_sidecar_submitter_failure() -> None:
    world = World()
    cluster, _ = start_to_running(world, submissionMode="SidecarMode")
    terminate_sidecar(world, cluster, exit_code=1)
    step(world)
    status = status_of(world)
    assert (status["jobDeploymentStatus"], status["reason"]) == ("Failed", "SubmissionFailed")
    assert status["message"] == "Ray head pod container ray-job-submitter terminated with exit code 1: Error"


def test_sidecar_head_pod_missing() -> None:
    world = World()
    cluster, _ = start_to_running(world, submissionMode="SidecarMode")
    pod = next(p for p in world.of_kind("Pod") if p["metadata"]["labels"]["ray.io/cluster"] == cluster)
    world.remove("Pod", pod["metadata"]["name"])
    step(world)
    status = status_of(world)
    assert (status["jobDeploymentStatus"], status["message"]) == ("Failed", "Ray head pod not found.")


def test_cluster_selector_uses_and_never_deletes_the_cluster() -> None:
    world = World()
    world.add(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "shared"},
            "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h", "image": "ray"}]}}}},
        }
    )
    make_cluster_ready(world, "shared")
    cluster, job_id = start_to_running(
        world, clusterSelector={"ray.io/cluster": "shared"}, rayClusterSpec=None, shutdownAfterJobFinishes=True
    )
    assert cluster == "shared"
    assert created(world, "RayCluster") == []
    step(world)
    assert world.get("Service", "rj-head-svc") is None
    world.observations[job_id] = job_info(job_id, "SUCCEEDED", end_ms=1714564900000)
    finish_submitter(world, "rj")
    step(world)
    assert status_of(world)["jobDeploymentStatus"] == "Complete"
    world.advance(3600)
    final = step(world)
    assert final.commands == () and "5.6/cluster-selector-keeps-cluster" in final.rules
    assert world.get("RayCluster", "shared") is not None


def test_cluster_selector_missing_cluster() -> None:
    world = World()
    world.add(rayjob(clusterSelector={"ray.io/cluster": "nope"}, rayClusterSpec=None))
    step(world)
    decision = step(world)
    (event,) = decision.commands
    assert event.reason == "RayClusterNotFound"
    assert (
        event.message == "RayCluster default/nope set in the clusterSelector is not found. It must be created manually"
    )


def test_http_mode_submits_on_404() -> None:
    world = World()
    cluster, job_id = start_to_running(world, submissionMode="HTTPMode", metadata={"team": "a"})
    assert world.get("Job", "rj") is None
    world.observations[job_id] = {"http_status": 404}
    decision = step(world)
    (submit,) = [c for c in decision.commands if isinstance(c, SubmitRayJob)]
    assert submit.request == {
        "entrypoint": "python /home/ray/samples/sample_code.py",
        "submission_id": job_id,
        "metadata": {"team": "a"},
    }
    assert (submit.dashboard.service, submit.dashboard.port, submit.dashboard.cluster) == (
        f"{cluster}-head-svc",
        8265,
        cluster,
    )
    assert decision.wake_at == world.now + timedelta(seconds=3)
    world.observations[job_id] = job_info(job_id, "PENDING")
    decision = step(world)
    assert not [c for c in decision.commands if isinstance(c, SubmitRayJob)]
    assert decision.wake_at is None
    world.observations[job_id] = job_info(job_id, "SUCCEEDED", end_ms=1714564900000)
    step(world)
    assert status_of(world)["jobDeploymentStatus"] == "Complete"  # no submitter to wait for


def test_status_check_timeout_after_dashboard_errors() -> None:
    world = World()
    _, job_id = start_to_running(world, backoffLimit=2)
    step(world)
    world.observations[job_id] = {"error": "connection refused", "http_status": 0}
    decision = step(world)
    assert status_of(world)["jobStatusCheckFailureStartTime"] == stamp(world.now)
    assert decision.wake_at == world.now + timedelta(seconds=300)
    failing_since = world.now
    world.advance(100)
    world.observations[job_id] = {"error": "timeout", "http_status": 504}
    decision = step(world)
    assert status_of(world)["jobStatusCheckFailureStartTime"] == stamp(failing_since)
    assert decision.wake_at == failing_since + timedelta(seconds=300)
    world.advance_to(decision.wake_at)
    step(world)
    status = status_of(world)
    assert (status["jobDeploymentStatus"], status["reason"]) == ("Failed", "JobStatusCheckTimeoutExceeded")
    assert status["failed"] == 1  # not retried


def test_dashboard_recovery_clears_the_failure_timer() -> None:
    world = World()
    _, job_id = start_to_running(world)
    step(world)
    world.observations[job_id] = {"error": "connection refused", "http_status": 0}
    step(world)
    world.observations[job_id] = job_info(job_id, "RUNNING")
    decision = step(world)
    assert "jobStatusCheckFailureStartTime" not in status_of(world)
    assert decision.wake_at is None


def test_transition_grace_period() -> None:
    config = OperatorConfig(
        switches=msgspec.structs.replace(
            OperatorConfig().switches, rayjob_deployment_status_transition_grace_period_seconds=60.0
        )
    )
    world = World(config=config)
    _, job_id = start_to_running(world)
    end = world.now + timedelta(seconds=5)
    world.observations[job_id] = job_info(job_id, "FAILED", end_ms=int(end.timestamp() * 1000))
    decision = step(world)
    assert decision.wake_at == end + timedelta(seconds=60)
    world.advance_to(decision.wake_at)
    step(world)
    status = status_of(world)
    assert (status["jobDeploymentStatus"], status["reason"]) == (
        "Failed",
        "JobDeploymentStatusTransitionGracePeriodExceeded",
    )


def test_deleting_a_running_rayjob_stops_the_job_and_drops_the_finalizer() -> None:
    world = World()
    cluster, job_id = start_to_running(world)
    step(world)
    world.delete("RayJob", "rj")
    decision = step(world)
    stop, patch = decision.commands
    assert isinstance(stop, StopRayJob) and isinstance(patch, PatchObject)
    assert stop.job_id == job_id
    assert (stop.dashboard.namespace, stop.dashboard.service, stop.dashboard.port) == (
        "default",
        f"{cluster}-head-svc",
        8265,
    )
    assert patch.patch_type == "json" and patch.resource_version
    assert patch.patch == [
        {"op": "test", "path": "/metadata/finalizers/0", "value": "ray.io/rayjob-finalizer"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    assert world.get("RayJob", "rj") is None
    assert world.get("RayCluster", cluster) is None  # garbage-collected through the owner reference


def test_deleting_a_finished_rayjob_does_not_stop_the_job() -> None:
    world = World()
    _, job_id = start_to_running(world, submissionMode="HTTPMode")
    world.observations[job_id] = job_info(job_id, "SUCCEEDED", end_ms=1714564900000)
    step(world)
    world.delete("RayJob", "rj")
    decision = step(world)
    assert [type(c) for c in decision.commands] == [PatchObject]


def test_status_is_written_once_per_pass_with_the_resource_version() -> None:
    world = World()
    world.add(rayjob())
    rv = world.existing("RayJob", "rj")["metadata"]["resourceVersion"]
    decision = step(world)
    patches = [c for c in decision.commands if isinstance(c, PatchStatus)]
    assert len(patches) == 1 and patches[0].resource_version == rv
    (transition,) = patches[0].transitions
    assert (transition.kind, transition.field, transition.from_value, transition.to_value) == (
        "RayJob",
        "jobDeploymentStatus",
        "",
        "Initializing",
    )
    assert transition.resource_version == rv and transition.at == NOW


def test_managed_by_external_controller_is_skipped() -> None:
    world = World()
    world.add(rayjob(managedBy="kueue.x-k8s.io/multikueue"))
    decision = step(world)
    assert decision.commands == () and decision.rules == ("5.1/managed-by-external",)


@pytest.mark.parametrize(
    ("gate", "expected"),
    [pytest.param(False, ["--no-wait"], id="plain"), pytest.param(True, ["--no-wait", "logs"], id="restart-gate")],
)
def test_sidecar_restart_gate_adds_status_check(gate: bool, expected: list[str]) -> None:
    config = OperatorConfig(gates=FeatureGates(sidecar_submitter_restart=gate))
    world = World(config=config)
    cluster, _ = start_to_running(world, submissionMode="SidecarMode")
    sidecar = world.existing("RayCluster", cluster)["spec"]["headGroupSpec"]["template"]["spec"]["containers"][-1]
    for token in expected:
        assert (token in sidecar["args"][0]) is gate
    assert (sidecar.get("restartPolicy") == "OnFailure") is gate
