"""Every RayJob path through the real pipeline (kubesim, watcher, reconciler, status on nats-server).

One pipeline serves the module (the outage test, which needs a short status-check timeout, has its own);
each test runs its RayJob in a namespace of its own. Job outcomes are scripted with kubesim's markers
(kubesim/dashboard/README.md). Timers are JetStream message schedules with a 1 s resolution, so the
deadlines and TTLs here are a few seconds. Each test checks the end state in Kubernetes, the recorded
transitions in the status service and, where it matters, the command audit trail.
"""

from __future__ import annotations

import asyncio
import dataclasses
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from kubesim.dashboard import JobStatus
from services.runtime.health import HealthServer
from services.runtime.metrics import setup_metrics
from services.runtime.settings import RaybusSettings
from tests.e2e.clusters import small_cluster
from tests.e2e.pipeline import Pipeline, running_pipeline, shared_pipeline
from tests.e2e.rayjobs import LONG, JobDriver, applied, ended, parse_time, small_rayjob, steps
from tests.helpers import eventually
from tests.kubeobjects import name_of

pytestmark = pytest.mark.asyncio(loop_scope="module")

ATTEMPT = [("", "Initializing"), ("Initializing", "Running")]
"""The deployment transitions that open every attempt of a RayJob with its own cluster."""


@pytest.fixture(autouse=True)
def _no_leaked_tasks() -> None:
    """Replaces the per-test leak guard: ``shared_pipeline`` checks once the module's pipeline stopped."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pipe(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pipeline]:
    async with shared_pipeline(tmp_path_factory.mktemp("rayjob")) as p:
        yield p


async def test_success(pipe: Pipeline) -> None:
    job = JobDriver(pipe, small_rayjob("ok"), "path-success")
    await job.create()
    status = await job.wait_deployment("Complete")
    assert status["jobStatus"] == "SUCCEEDED"
    assert (status["succeeded"], status["failed"]) == (1, 0)
    assert status["startTime"] and status["endTime"] and status["rayJobInfo"]["endTime"]
    assert status["dashboardURL"] == f"{status['rayClusterName']}-head-svc.path-success.svc.cluster.local:8265"
    rows = await job.history(until=ended("Complete"))
    assert steps(rows) == [*ATTEMPT, ("Running", "Complete")]
    assert steps(rows, "jobStatus")[-1][1] == "SUCCEEDED"  # RUNNING first if the prober saw it running
    # without a cleanup policy the cluster and the submitter Job stay
    assert await job.clusters() == [status["rayClusterName"]]
    assert await job.submitter_jobs() == ["ok"]


async def test_application_failure_retries_with_new_clusters(pipe: Pipeline) -> None:
    """backoffLimit 2: three attempts, each on a new cluster, then Failed/AppFailed with ``failed: 3``.

    HTTPMode (raybus submits the job itself). In K8sJobMode a failed Ray job ends the same way (the
    submitter's ``ray job logs --follow`` exits 0, as the real CLI does; the real-Ray tier proves it); the
    K8sJobMode retry path of a failed submitter is ``test_submission_failure``'s.
    """
    body = small_rayjob("app-fail", entrypoint="KUBESIM_EXIT_CODE=1 python main.py", backoffLimit=2)
    body["spec"]["submissionMode"] = "HTTPMode"
    job = JobDriver(pipe, body, "path-backoff")
    await job.create()
    status = await job.wait(lambda s: s.get("failed") == 3, "failed three times", timeout=90)
    assert status["jobDeploymentStatus"] == "Failed"
    assert (status["reason"], status["jobStatus"], status["succeeded"]) == ("AppFailed", "FAILED", 0)
    assert "exit code 1" in status["message"]
    rows = await job.history(until=lambda rows: steps(rows).count(("Running", "Failed")) == 3)
    attempt = [*ATTEMPT, ("Running", "Failed")]
    assert steps(rows) == [*attempt, ("Failed", "Retrying"), ("Retrying", "")] * 2 + attempt
    assert {r["reason"] for r in rows if r["to_value"] == "Failed"} == {"AppFailed"}
    clusters = [r["attributes"]["rayClusterName"] for r in rows if r["to_value"] == "Initializing"]
    assert len(set(clusters)) == 3, clusters
    # the clusters of the retried attempts were deleted; the last one stays (no cleanup policy)
    assert await job.clusters() == [status["rayClusterName"]] == clusters[-1:]


async def test_submission_failure(pipe: Pipeline) -> None:
    """The submitter pod fails before it submits (K8sJobMode): SubmissionFailed; with backoffLimit 1 it is
    retried once, on a new cluster with a new submitter Job."""
    faulty = {"kubesim.raybus.io/fail-after-seconds": "0", "kubesim.raybus.io/exit-code": "1"}
    submitter = {
        "metadata": {"annotations": faulty},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "ray-job-submitter", "image": "rayproject/ray"}]},
    }
    body = small_rayjob("submit-fail", submitterPodTemplate=submitter, submitterConfig={"backoffLimit": 0})
    body["spec"]["backoffLimit"] = 1
    job = JobDriver(pipe, body, "path-submission")
    await job.create()
    status = await job.wait(lambda s: s.get("failed") == 2, "failed twice")
    assert (status["jobDeploymentStatus"], status["reason"]) == ("Failed", "SubmissionFailed")
    assert status["message"].startswith("Job submission has failed. Reason: BackoffLimitExceeded.")
    assert not status.get("jobStatus")
    rows = await job.history(until=lambda rows: steps(rows).count(("Running", "Failed")) == 2)
    attempt = [*ATTEMPT, ("Running", "Failed")]
    assert steps(rows) == [*attempt, ("Failed", "Retrying"), ("Retrying", ""), *attempt]
    assert {r["reason"] for r in rows if r["to_value"] == "Failed"} == {"SubmissionFailed"}
    assert await job.submitter_jobs() == ["submit-fail"]  # the first one was deleted by the retry

    def submitter_calls(rows: list[dict[str, Any]]) -> list[str]:
        return [c["verb"] for c in rows if c["target"].startswith("Job ") and c["outcome"] == "applied"]

    audit = await job.commands(until=lambda rows: len(submitter_calls(rows)) == 3)
    assert submitter_calls(audit) == ["create_object", "delete_object", "create_object"]


async def test_active_deadline(pipe: Pipeline) -> None:
    body = small_rayjob("deadline", entrypoint=LONG, activeDeadlineSeconds=3, backoffLimit=1)
    job = JobDriver(pipe, body, "path-deadline")
    await job.create()
    status = await job.wait_deployment("Failed")
    assert status["reason"] == "DeadlineExceeded"
    assert "ActiveDeadlineSeconds: 3" in status["message"]
    assert (parse_time(status["endTime"]) - parse_time(status["startTime"])).total_seconds() >= 3
    assert status["failed"] == 1  # DeadlineExceeded is never retried, whatever backoffLimit says
    rows = await job.history(until=ended("Failed"))
    assert steps(rows) == [*ATTEMPT, ("Running", "Failed")]


async def test_pre_running_deadline(pipe: Pipeline) -> None:
    body = small_rayjob("pre-deadline", preRunningDeadlineSeconds=2)
    head = body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    head["metadata"] = {"annotations": {"kubesim.raybus.io/never-ready": "true"}}  # the cluster never gets ready
    job = JobDriver(pipe, body, "path-prerunning")
    await job.create()
    status = await job.wait_deployment("Failed")
    assert status["reason"] == "PreRunningDeadlineExceeded"
    assert (parse_time(status["endTime"]) - parse_time(status["startTime"])).total_seconds() >= 2
    rows = await job.history(until=ended("Failed"))
    assert steps(rows) == [("", "Initializing"), ("Initializing", "Failed")]


async def test_suspend_and_resume(pipe: Pipeline) -> None:
    """Suspend a running job (its cluster and submitter go), change its entrypoint, resume: a new attempt
    on a new cluster runs the new entrypoint to Complete."""
    job = JobDriver(pipe, small_rayjob("pause", entrypoint=LONG, shutdownAfterJobFinishes=True), "path-suspend")
    await job.create()
    first = await job.wait(lambda s: s.get("jobStatus") == "RUNNING", "ran")
    await job.patch({"spec": {"suspend": True}})
    suspended = await job.wait_deployment("Suspended")
    assert not suspended.get("rayClusterName") and not suspended.get("jobId")
    await job.wait_no_clusters("suspending never deleted the cluster")
    assert await job.submitter_jobs() == []
    await job.patch({"spec": {"suspend": False, "entrypoint": "python main.py"}})
    status = await job.wait_deployment("Complete")
    assert status["rayClusterName"] != first["rayClusterName"] and status["jobId"] != first["jobId"]
    rows = await job.history(until=ended("Complete"))
    assert steps(rows) == [
        *ATTEMPT,
        ("Running", "Suspending"),
        ("Suspending", "Suspended"),
        ("Suspended", ""),
        *ATTEMPT,
        ("Running", "Complete"),
    ]


async def test_interactive_mode_waits_for_the_job_id(pipe: Pipeline) -> None:
    body = small_rayjob("interactive", submissionMode="InteractiveMode")
    del body["spec"]["entrypoint"]
    job = JobDriver(pipe, body, "path-interactive")
    await job.create()
    waiting = await job.wait_deployment("Waiting")
    assert not waiting.get("jobId")
    assert await job.submitter_jobs() == []
    await job.patch({"spec": {"jobId": "my-interactive-job"}})
    await job.wait(
        lambda s: s.get("jobDeploymentStatus") == "Running" and s.get("jobId") == "my-interactive-job", "ran"
    )
    # the user submits the job to the cluster's dashboard
    request = {"entrypoint": "python main.py", "submission_id": "my-interactive-job"}
    answer = await job.dashboard_post(f"{waiting['rayClusterName']}-head-svc", "/api/jobs/", request)
    assert answer["submission_id"] == "my-interactive-job"
    status = await job.wait_deployment("Complete")
    assert status["jobStatus"] == "SUCCEEDED"
    rows = await job.history(until=ended("Complete"))
    expected = [("", "Initializing"), ("Initializing", "Waiting"), ("Waiting", "Running"), ("Running", "Complete")]
    assert steps(rows) == expected


async def test_sidecar_mode(pipe: Pipeline) -> None:
    job = JobDriver(pipe, small_rayjob("sidecar", submissionMode="SidecarMode"), "path-sidecar")
    await job.create()
    status = await job.wait_deployment("Complete")
    assert status["jobStatus"] == "SUCCEEDED"
    head = await job.head_pod(status["rayClusterName"])
    assert head.spec is not None
    assert [c.name for c in head.spec.containers][-1] == "ray-job-submitter"
    assert head.spec.restart_policy == "Never"
    assert await job.submitter_jobs() == []
    rows = await job.history(until=ended("Complete"))
    assert steps(rows) == [*ATTEMPT, ("Running", "Complete")]


async def test_cluster_selector_uses_an_existing_cluster_and_never_deletes_it(pipe: Pipeline) -> None:
    body = small_rayjob("selected", clusterSelector={"ray.io/cluster": "shared"})
    del body["spec"]["rayClusterSpec"]
    job = JobDriver(pipe, body, "path-selector")
    await job.create()
    # the cluster may come later: the RayJob waits in Initializing (KubeRay: RayClusterNotFound events)
    await job.wait_deployment("Initializing")
    await job.create_cluster(small_cluster("shared"))
    status = await job.wait_deployment("Complete")
    assert status["rayClusterName"] == "shared"
    await job.delete()
    await job.wait_gone()
    assert await job.clusters() == ["shared"]
    services = await asyncio.to_thread(pipe.core().list_namespaced_service, job.namespace)
    assert [name_of(s) for s in services.items] == ["shared-head-svc"]  # no <rj>-head-svc in this mode
    audit = await job.commands(until=applied("patch_object", "RayJob"))
    assert not [c for c in audit if c["verb"] == "delete_object"]


async def test_deletion_rules_run_in_ttl_order(pipe: Pipeline) -> None:
    """SUCCEEDED rules DeleteWorkers (1 s), DeleteCluster (10 s), DeleteSelf (12 s) run in that order, each
    no earlier than endTime + its TTL; the FAILED rule never matches.

    Once two TTLs have passed only the more impactful rule runs (KubeRay's choice), so the suspended
    worker group is visible only between the first two: 9 s apart, so a wake-up that a busy machine
    delivers a few seconds late still lands between them."""
    rules: list[dict[str, Any]] = [
        {"condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": ttl}, "policy": policy}
        for policy, ttl in (("DeleteWorkers", 1), ("DeleteCluster", 10), ("DeleteSelf", 12))
    ]
    rules.append({"condition": {"jobStatus": "FAILED", "ttlSeconds": 0}, "policy": "DeleteSelf"})
    job = JobDriver(pipe, small_rayjob("rules", workers=1, deletionStrategy={"deletionRules": rules}), "policy-rules")
    await job.create()
    status = await job.wait_deployment("Complete")
    name = status["rayClusterName"]

    async def workers_suspended() -> bool:
        cluster = await job.cluster(name)
        return cluster is not None and all(g.get("suspend") is True for g in cluster["spec"]["workerGroupSpecs"])

    await eventually(workers_suspended, message="DeleteWorkers never suspended the worker group")
    await job.wait_no_clusters("DeleteCluster never deleted the cluster")
    await job.wait_gone("was deleted by DeleteSelf")
    audit = await job.commands(until=applied("delete_object", "RayJob"))
    done = [(c["verb"], c["target"].split()[0], parse_time(c["at"])) for c in audit if c["outcome"] == "applied"]
    cleanup = [(verb, kind) for verb, kind, _ in done if verb in ("patch_object", "delete_object") and kind != "Job"]
    cleanup = [c for c in cleanup if c != ("patch_object", "RayJob")][-3:]  # (finalizer patches)
    assert cleanup == [("patch_object", "RayCluster"), ("delete_object", "RayCluster"), ("delete_object", "RayJob")]
    end = parse_time(status["endTime"])
    at = {(verb, kind): when for verb, kind, when in done}
    assert (at["patch_object", "RayCluster"] - end).total_seconds() >= 1
    assert (at["delete_object", "RayCluster"] - end).total_seconds() >= 10
    assert (at["delete_object", "RayJob"] - end).total_seconds() >= 12


async def test_legacy_deletion_policy(pipe: Pipeline) -> None:
    """``onSuccess: DeleteSelf`` after ``ttlSecondsAfterFinished`` (the legacy policy replaces the
    shutdown rule): the RayJob goes, and its cluster with it."""
    strategy = {"onSuccess": {"policy": "DeleteSelf"}, "onFailure": {"policy": "DeleteCluster"}}
    body = small_rayjob("legacy", deletionStrategy=strategy, shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=2)
    job = JobDriver(pipe, body, "policy-legacy")
    await job.create()
    status = await job.wait_deployment("Complete")
    await job.wait_gone("was deleted by onSuccess DeleteSelf")
    await job.wait_no_clusters("the cluster did not go with its RayJob")
    audit = await job.commands(until=applied("delete_object", "RayJob"))
    deleted = [c for c in audit if c["verb"] == "delete_object"]
    assert [c["target"] for c in deleted] == ["RayJob policy-legacy/legacy"]
    assert (parse_time(deleted[0]["at"]) - parse_time(status["endTime"])).total_seconds() >= 2


async def test_shutdown_after_job_finishes_with_ttl(pipe: Pipeline) -> None:
    body = small_rayjob("shutdown", shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=2)
    job = JobDriver(pipe, body, "policy-shutdown")
    await job.create()
    status = await job.wait_deployment("Complete")
    await job.wait_no_clusters("the cluster was never deleted")
    assert (await job.status())["jobDeploymentStatus"] == "Complete"  # the RayJob stays
    assert await job.submitter_jobs() == ["shutdown"]  # and the submitter, for its logs
    audit = await job.commands(until=applied("delete_object", "RayCluster"))
    deleted = [c for c in audit if c["verb"] == "delete_object"]
    assert [c["target"] for c in deleted] == [f"RayCluster policy-shutdown/{status['rayClusterName']}"]
    assert (parse_time(deleted[0]["at"]) - parse_time(status["endTime"])).total_seconds() >= 2


async def test_deleting_a_running_rayjob_stops_its_ray_job(pipe: Pipeline) -> None:
    job = JobDriver(pipe, small_rayjob("doomed", entrypoint=LONG), "path-delete")
    await job.create()
    status = await job.wait(lambda s: s.get("jobStatus") == "RUNNING", "ran")
    dashboard = pipe.kube.dashboards.dashboard_state(job.namespace, status["rayClusterName"])
    assert dashboard is not None
    record = dashboard.jobs.get(status["jobId"])
    assert record is not None
    await job.delete()
    await job.wait_gone("lost its finalizer")
    assert pipe.kube.call(lambda: dashboard.jobs.status(record)) == JobStatus.STOPPED

    def stopped_then_released(rows: list[dict[str, Any]]) -> bool:
        done = [(c["verb"], c["target"].split()[0]) for c in rows if c["outcome"] == "applied"]
        stop = ("stop_ray_job", "dashboard")
        return stop in done and ("patch_object", "RayJob") in done[done.index(stop) :]

    await job.commands(until=stopped_then_released)  # the stop, then the finalizer's removal
    await job.wait_no_clusters("the cluster was not garbage-collected")
    rows = await job.history(until=lambda rows: "deleted" in [to for _, to in steps(rows, "lifecycle")])
    assert steps(rows)[-1] == ("Initializing", "Running")


def short_status_check(settings: RaybusSettings) -> RaybusSettings:
    """RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS=2 instead of 300."""
    switches = msgspec.structs.replace(settings.operator.switches, rayjob_status_check_timeout_seconds=2.0)
    return dataclasses.replace(settings, operator=msgspec.structs.replace(settings.operator, switches=switches))


async def test_dashboard_outage_longer_than_the_status_check_timeout(tmp_path: Path) -> None:
    """The head's dashboard stops answering (the pod stays Running): the prober reports the error once,
    reconcile starts the failure timer, and the timer's wake-up fails the job (never retried)."""
    async with running_pipeline(tmp_path, settings_hook=short_status_check) as p:
        body = small_rayjob("outage", entrypoint=LONG, submissionMode="HTTPMode", backoffLimit=1)
        job = JobDriver(p, body, "path-outage")
        await job.create()
        status = await job.wait(lambda s: s.get("jobStatus") == "RUNNING", "ran")
        pod = await job.head_pod(status["rayClusterName"])
        meta = pod.metadata
        assert meta is not None
        head = {"metadata": {"namespace": job.namespace, "name": meta.name, "uid": meta.uid, "labels": meta.labels}}
        stopping = asyncio.run_coroutine_threadsafe(p.kube.dashboards.stop_for(head), p.kube.loop)
        await asyncio.wrap_future(stopping)
        failing = await job.wait(lambda s: bool(s.get("jobStatusCheckFailureStartTime")), "saw the outage")
        status = await job.wait_deployment("Failed")
        assert (status["reason"], status["failed"]) == ("JobStatusCheckTimeoutExceeded", 1)
        since = parse_time(failing["jobStatusCheckFailureStartTime"])
        assert (parse_time(status["endTime"]) - since).total_seconds() >= 2
        rows = await job.history(until=ended("Failed"))
        assert steps(rows)[-1] == ("Running", "Failed")
        assert rows[-1]["reason"] == "JobStatusCheckTimeoutExceeded"


async def scrape(health: HealthServer, namespace: str) -> dict[str, list[dict[str, str]]]:
    """``/metrics`` of a service: the labels of every ``kuberay_job_*`` sample of ``namespace``."""

    def get() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{health.port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    found: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(await asyncio.to_thread(get)):
        for sample in family.samples:
            if sample.name.startswith("kuberay_job_") and sample.labels.get("namespace") == namespace:
                labels = {k: v for k, v in sample.labels.items() if not k.startswith("otel_scope_")}
                found.setdefault(sample.name, []).append({**labels, "value": f"{sample.value:g}"})
    return found


async def test_kuberay_job_metrics_on_the_status_service(pipe: Pipeline) -> None:
    """KubeRay's RayJob metrics on the status service's ``/metrics``: info and deployment status of each
    live RayJob, one execution duration per ended attempt (a retried one counts its retries), nothing
    left of a deleted RayJob."""
    setup_metrics("raybus-e2e")  # what `raybus status` does at start; once per process
    health = pipe.components["status"].health
    await health.start()
    try:
        body = small_rayjob("metered", entrypoint="KUBESIM_EXIT_CODE=1 python main.py", backoffLimit=1)
        body["spec"]["submissionMode"] = "HTTPMode"
        failing = JobDriver(pipe, body, "metrics")
        await failing.create()
        ok = JobDriver(pipe, small_rayjob("fine"), "metrics")
        await ok.create(namespace=False)
        await failing.wait(lambda s: s.get("failed") == 2, "failed twice")
        await ok.wait_deployment("Complete")

        async def exported() -> dict[str, list[dict[str, str]]] | None:
            found = await scrape(health, "metrics")
            durations = found.get("kuberay_job_execution_duration_seconds", [])
            return found if len(durations) == 3 else None

        found = await eventually(exported, message="the execution durations were never all exported")
        assert found is not None
        uids = {labels["name"]: labels["uid"] for labels in found["kuberay_job_info"]}
        assert sorted(uids) == ["fine", "metered"] and all(uids.values())
        statuses = {(m["name"], m["deployment_status"], m["value"]) for m in found["kuberay_job_deployment_status"]}
        assert statuses == {("fine", "Complete", "1"), ("metered", "Failed", "1")}
        ends = {
            (m["name"], m["job_deployment_status"], m["retry_count"])
            for m in found["kuberay_job_execution_duration_seconds"]
        }
        assert ends == {("fine", "Complete", "0"), ("metered", "Retrying", "0"), ("metered", "Failed", "1")}
        assert all(float(m["value"]) > 0 for m in found["kuberay_job_execution_duration_seconds"])

        await failing.delete()
        await failing.wait_gone()

        async def forgotten() -> bool:
            found = await scrape(health, "metrics")
            return all(m["name"] == "fine" for samples in found.values() for m in samples)

        await eventually(forgotten, message="the deleted RayJob's series stayed")
    finally:
        await health.stop()
