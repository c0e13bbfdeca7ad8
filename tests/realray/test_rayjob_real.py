"""RayJobs on real Ray heads: each submission mode to Succeeded, a failing Ray job and a job that can never
start, each ending as KubeRay documents; their recorded history and replay.

The RayJobs start together (one real head each) and each test waits for its own, so the module costs
about one head start-up instead of four.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from schema.keys import ReconcileKey
from tests.e2e.pipeline import Pipeline, shared_pipeline
from tests.e2e.rayjobs import JobDriver, ended, steps
from tests.realray.jobs import real_rayjob
from tests.replays.scenarios import assert_every_decision_matched, settled_history
from tests.unit.replay.clirun import replay_cli_async

pytestmark = pytest.mark.asyncio(loop_scope="module")

DRIVER = "import ray; ray.init(); print('sum', ray.get(ray.remote(lambda x: x + 1).remote(41)))"
TIMEOUT = 300.0
"""Seconds a RayJob may take to end here: heads start in 10-20 s, more while other tests load the machine."""


@pytest.fixture(autouse=True)
def _no_leaked_tasks() -> None:
    """Replaces the per-test leak guard: ``shared_pipeline`` checks once the module's pipeline stopped."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pipe(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pipeline]:
    async with shared_pipeline(tmp_path_factory.mktemp("realjob"), ray="real") as p:
        yield p


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def jobs(pipe: Pipeline) -> dict[str, JobDriver]:
    """Every RayJob of the module, created at once."""
    python = "python -c "
    drivers = {
        "http": JobDriver(pipe, real_rayjob("http", python + shlex.quote(DRIVER), mode="HTTPMode"), "real-http"),
        "k8s": JobDriver(pipe, real_rayjob("k8s", python + shlex.quote("print('ok')"), mode="K8sJobMode"), "real-k8s"),
        "fail": JobDriver(
            pipe,
            real_rayjob("fail", python + shlex.quote("import sys; sys.exit(3)"), mode="K8sJobMode"),
            "real-fail",
        ),
        # No head has a GPU: Ray keeps this job PENDING for as long as the cluster lives.
        "pending": JobDriver(
            pipe,
            real_rayjob(
                "pending",
                python + shlex.quote("print('never')"),
                mode="HTTPMode",
                entrypointNumGpus=1,
                activeDeadlineSeconds=45,
            ),
            "real-pending",
        ),
    }
    for driver in drivers.values():
        await driver.create()
    return drivers


async def test_httpmode_job_succeeds(jobs: dict[str, JobDriver]) -> None:
    job = jobs["http"]
    status = await job.wait_deployment("Complete", timeout=TIMEOUT)
    assert status["jobStatus"] == "SUCCEEDED"
    assert status["rayJobInfo"]["startTime"] and status["rayJobInfo"]["endTime"]
    rows = await job.history(until=ended("Complete"))
    assert steps(rows)[-1] == ("Running", "Complete")


async def test_k8sjobmode_job_succeeds_through_the_ray_cli(jobs: dict[str, JobDriver]) -> None:
    job = jobs["k8s"]
    status = await job.wait_deployment("Complete", timeout=TIMEOUT)
    assert status["jobStatus"] == "SUCCEEDED"
    assert await job.submitter_jobs() == ["k8s"]


async def test_failed_ray_job_fails_the_rayjob_through_the_dashboard(jobs: dict[str, JobDriver]) -> None:
    """The real ``ray job logs --follow`` exits 0 whatever the job's end, so the submitter Job completes and
    the RayJob fails on the dashboard's FAILED (KubeRay's AppFailed), not on a failed submitter."""
    job = jobs["fail"]
    status = await job.wait_deployment("Failed", timeout=TIMEOUT)
    assert (status["jobStatus"], status["reason"]) == ("FAILED", "AppFailed")
    assert "exit code 3" in status["message"]
    assert status["failed"] == 1


async def test_job_stuck_pending_ends_at_the_active_deadline(jobs: dict[str, JobDriver]) -> None:
    job = jobs["pending"]
    status = await job.wait_deployment("Failed", timeout=TIMEOUT)
    assert status["reason"] == "DeadlineExceeded"
    assert "activeDeadlineSeconds" in status["message"]
    # The Ray job never left PENDING (on a busy machine the deadline may come before raybus saw it at all).
    rows = await job.history(until=ended("Failed"))
    assert {to for _, to in steps(rows, "jobStatus")} <= {"", "PENDING"}


async def test_history_and_replay_of_the_real_runs(pipe: Pipeline, jobs: dict[str, JobDriver]) -> None:
    for name, end in (("http", "Complete"), ("fail", "Failed")):
        job = jobs[name]
        await job.wait_deployment(end, timeout=TIMEOUT)
        rows = await job.history(until=ended(end))
        assert steps(rows)[:2] == [("", "Initializing"), ("Initializing", "Running")]
        await job.delete()
        await job.wait_gone()
        history = await settled_history(pipe, ReconcileKey(kind="RayJob", namespace=job.namespace, name=job.name))
        run = await replay_cli_async(["RayJob", f"{job.namespace}/{job.name}", "--nats-url", pipe.nats.url])
        assert run.code == 0, run.out + run.err
        assert_every_decision_matched(run.out, history)
