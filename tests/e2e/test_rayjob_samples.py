"""KubeRay's RayJob samples through the pipeline, their recorded histories, and their replay.

Each sample's documents (the RayJob and its ConfigMap) are applied unchanged into a namespace of their
own, with two exceptions said where they happen: ``ray-job.deletion-rules`` waits 30/60/90 s, so its
TTLs are patched down to 1/2/3 s (same order, same policies), and ``ray-job.use-existing-raycluster``
needs the RayCluster it names, which no sample ships: ``ray-cluster.sample`` is created under that name.
``ray-job.interactive-mode`` gets its ``spec.jobId`` and the job is submitted to its dashboard, as a
user would. All samples run at once; each must reach the end KubeRay's sample e2e tests expect
(Complete + SUCCEEDED) and its cleanup policy must run. Then every RayJob is deleted and:

- ``raybus history rayjob NS/NAME`` (against the pipeline's status API) shows its whole life: the
  transitions from New to its end, and its deletion;
- replaying its recorded events (read live from NATS) through ``reconcile`` reproduces the recorded
  decisions and exactly the transitions the status service persisted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, dynamic

from schema.keys import ReconcileKey
from schema.messages import PatchStatus
from services.replay.history import KeyHistory
from services.replay.replayer import Replayer
from services.status import history_cli
from tests.e2e.drivers import Rows
from tests.e2e.pipeline import Pipeline, load_yaml_docs, running_pipeline
from tests.e2e.rayjobs import JobDriver, steps
from tests.helpers import samples_dir
from tests.replays.scenarios import settled_history

Check = Callable[[JobDriver, dict[str, Any]], Awaitable[None]]
TO_COMPLETE = (("", "Initializing"), ("Initializing", "Running"), ("Running", "Complete"))
INTERACTIVE = (("", "Initializing"), ("Initializing", "Waiting"), ("Waiting", "Running"), ("Running", "Complete"))


async def submitter_container(job: JobDriver) -> client.V1Container:
    found = await asyncio.to_thread(client.BatchV1Api(job.p.api).read_namespaced_job, job.name, job.namespace)
    assert found.spec is not None and found.spec.template.spec is not None
    containers: list[client.V1Container] = found.spec.template.spec.containers
    return containers[0]


async def resources_reach_the_submitter(job: JobDriver, _: dict[str, Any]) -> None:
    args = (await submitter_container(job)).args
    assert args is not None
    script = args[0]
    assert "--entrypoint-num-cpus 2.000000 --entrypoint-num-gpus 0.500000" in script
    assert '--entrypoint-resources "{\\"resource1\\": 1, \\"resource2\\": 2}"' in script


async def custom_head_service_is_the_dashboard(_: JobDriver, status: dict[str, Any]) -> None:
    assert status["dashboardURL"].startswith("custom-ray-head-service-name.custom-head-svc.svc.")


async def sidecar_submits_from_the_head(job: JobDriver, status: dict[str, Any]) -> None:
    head = await job.head_pod(status["rayClusterName"])
    assert head.spec is not None
    assert [c.name for c in head.spec.containers] == ["ray-head", "ray-job-submitter"]
    assert await job.submitter_jobs() == []


async def user_submitter_is_kept(job: JobDriver, status: dict[str, Any]) -> None:
    container = await submitter_container(job)
    assert (container.name, container.command) == ("my-custom-rayjob-submitter", ["/submitter"])
    assert container.env is not None
    env = {e.name: e.value for e in container.env}
    assert env["RAY_JOB_SUBMISSION_ID"] == status["jobId"]


async def no_submitter(job: JobDriver, _: dict[str, Any]) -> None:
    assert await job.submitter_jobs() == []


async def nothing(_: JobDriver, __: dict[str, Any]) -> None:
    return None


@dataclass(frozen=True)
class Sample:
    """One sample: its file, the deployment transitions its RayJob must go through, its cleanup."""

    file: str
    transitions: tuple[tuple[str, str], ...] = TO_COMPLETE
    check: Check = nothing
    deletes_itself: bool = False
    deletes_cluster: bool = False

    @property
    def namespace(self) -> str:
        return self.file.removeprefix("ray-job.").removesuffix(".yaml")


SAMPLES = (
    Sample("ray-job.sample.yaml"),
    Sample("ray-job.shutdown.yaml", deletes_cluster=True),  # ttlSecondsAfterFinished: 10, kept as is
    Sample("ray-job.resources.yaml", check=resources_reach_the_submitter),
    Sample("ray-job.custom-head-svc.yaml", check=custom_head_service_is_the_dashboard),
    Sample("ray-job.interactive-mode.yaml", transitions=INTERACTIVE, check=no_submitter),
    Sample("ray-job.sidecar-mode.yaml", check=sidecar_submits_from_the_head),
    Sample("ray-job.light-weight-submitter.yaml", check=user_submitter_is_kept),
    Sample("ray-job.deletion-rules.yaml", deletes_itself=True, deletes_cluster=True),
    Sample("ray-job.use-existing-raycluster.yaml"),
)
EXISTING_CLUSTER = "ray-cluster-kuberay"


def apply_docs(p: Pipeline, docs: list[dict[str, Any]], namespace: str) -> None:
    dyn = dynamic.DynamicClient(p.api)  # type: ignore[no-untyped-call]
    for doc in docs:
        doc.setdefault("metadata", {})["namespace"] = namespace
        dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).create(body=doc, namespace=namespace)


async def apply_sample(p: Pipeline, sample: Sample) -> JobDriver:
    """Create the sample's namespace and documents (see the module docstring for the two changes)."""
    docs = load_yaml_docs(samples_dir() / sample.file)
    rayjob = next(d for d in docs if d["kind"] == "RayJob")
    if sample.file == "ray-job.deletion-rules.yaml":
        for rule in rayjob["spec"]["deletionStrategy"]["deletionRules"]:
            rule["condition"]["ttlSeconds"] //= 30  # 30/60/90 s → 1/2/3 s
    if sample.file == "ray-job.use-existing-raycluster.yaml":
        assert rayjob["spec"]["clusterSelector"]["ray.io/cluster"] == EXISTING_CLUSTER
        cluster = next(
            d for d in load_yaml_docs(samples_dir() / "ray-cluster.sample.yaml") if d["kind"] == "RayCluster"
        )
        cluster["metadata"]["name"] = EXISTING_CLUSTER
        docs.insert(0, cluster)
    job = JobDriver(p, rayjob, sample.namespace)
    await job.create_namespace()
    await asyncio.to_thread(apply_docs, p, docs, sample.namespace)
    return job


async def run_interactive(job: JobDriver) -> None:
    """What a user of InteractiveMode does: wait for the cluster, set spec.jobId, submit that job."""
    waiting = await job.wait_deployment("Waiting", timeout=120)
    await job.patch({"spec": {"jobId": "interactive-sample"}})
    await job.wait(lambda s: s.get("jobId") == "interactive-sample", "took the job id")
    request = {"entrypoint": "python -c 'import ray; ray.init()'", "submission_id": "interactive-sample"}
    await job.dashboard_post(f"{waiting['rayClusterName']}-head-svc", "/api/jobs/", request)


async def reach_the_end(sample: Sample, job: JobDriver) -> None:
    """Drive the sample to Complete + SUCCEEDED, check it, let its cleanup run, then delete it."""
    if sample.file == "ray-job.interactive-mode.yaml":
        await run_interactive(job)
    if sample.deletes_itself:
        await job.wait_gone("was deleted by its DeleteSelf rule")
        await job.wait_no_clusters("its cluster did not go with it")
        return
    status = await job.wait_deployment("Complete", timeout=120)
    assert status["jobStatus"] == "SUCCEEDED", sample.file
    await sample.check(job, status)
    if sample.deletes_cluster:
        await job.wait_no_clusters("its cluster was never deleted")
    elif sample.file == "ray-job.use-existing-raycluster.yaml":
        assert await job.clusters() == [EXISTING_CLUSTER]
    else:
        assert await job.clusters() == [status["rayClusterName"]], sample.file
    await job.delete()
    await job.wait_gone()


async def history_via_cli(p: Pipeline, job: JobDriver, capsys: pytest.CaptureFixture[str], *, table: bool) -> str:
    """``raybus history rayjob NS/NAME --status-url URL [--json]``: what the CLI prints (its ``main`` runs
    its own event loop, so it runs in a thread)."""
    url = f"http://127.0.0.1:{p.settings.status.http_port}"
    argv = ["rayjob", f"{job.namespace}/{job.name}", "--status-url", url, *([] if table else ["--json"])]
    capsys.readouterr()
    code = await asyncio.to_thread(history_cli.main, argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


Step = tuple[str, str, str, str, str]


def persisted(rows: Rows) -> list[Step]:
    """(field, from, to, reason, resourceVersion) of the state-machine transitions the status service holds."""
    return [(r["field"], r["from_value"], r["to_value"], r["reason"], r["resource_version"]) for r in rows]


def replayed_transitions(p: Pipeline, history: KeyHistory) -> list[Step]:
    """The transitions today's ``reconcile`` decides for a recorded history, in order, without those the
    worker withheld as still in flight (an identical status write was being applied: only that one was
    recorded). Fails on any divergence from the recorded decisions."""
    result = Replayer(config=p.settings.operator).replay_history(history)
    assert result.divergences == () and result.unverifiable == 0
    found: list[Step] = []
    for step in result.steps:
        assert step.replayed is not None
        for command in step.kept_commands():
            if isinstance(command, PatchStatus):
                found += [
                    (t.field, t.from_value, t.to_value, t.reason, t.resource_version) for t in command.transitions
                ]
    return found


async def test_samples_end_history_and_replay(tmp_path: Path, db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    async with running_pipeline(tmp_path, db_url=db_url) as p:
        jobs = [await apply_sample(p, sample) for sample in SAMPLES]
        await asyncio.gather(*(reach_the_end(sample, job) for sample, job in zip(SAMPLES, jobs, strict=True)))
        selector = next(j for s, j in zip(SAMPLES, jobs, strict=True) if s.file.endswith("existing-raycluster.yaml"))
        assert await selector.clusters() == [EXISTING_CLUSTER]  # never deleted, even with its RayJob gone

        for sample, job in zip(SAMPLES, jobs, strict=True):
            rows = await job.history(until=lambda rows: "deleted" in [to for _, to in steps(rows, "lifecycle")])
            assert steps(rows) == list(sample.transitions), sample.file
            assert steps(rows, "jobStatus")[-1][1] == "SUCCEEDED", sample.file

            document = json.loads(await history_via_cli(p, job, capsys, table=False))
            assert document["resource"]["uid"] == rows[0]["uid"] and document["resource"]["deleted_at"], sample.file
            assert persisted(document["transitions"]) == persisted(rows)
            assert [to for _, to in steps(rows, "lifecycle")] == ["created", "deleted"], sample.file
            table = await history_via_cli(p, job, capsys, table=True)
            assert table.startswith(f"RayJob {job.namespace}/{job.name}\n"), table
            assert sum(" jobDeploymentStatus " in line for line in table.splitlines()) == len(sample.transitions)

            key = ReconcileKey(kind="RayJob", namespace=job.namespace, name=job.name)
            recorded = [t for t in persisted(rows) if t[0] != "lifecycle"]
            assert replayed_transitions(p, await settled_history(p, key)) == recorded, sample.file
        assert await p.denials() == []
