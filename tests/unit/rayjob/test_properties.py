"""Properties of the RayJob / RayCronJob reconcile: determinism, no polling, and robustness on any input."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schema.config import FeatureGates, OperatorConfig
from schema.decision import OBS_RAY_JOB, Decision, Snapshot
from schema.keys import ReconcileKey
from schema.probes import snapshot_targets
from services.reconciler import raycronjob, rayjob
from services.reconciler.worker.decide import guarded
from tests.unit.rayjob.builders import cluster_spec, finish_submitter, job_info, make_cluster_ready
from tests.unit.rayjob.builders import rayjob as rayjob_object
from tests.unit.rayjob.sim import NOW, World, stamp

MODES = ["K8sJobMode", "HTTPMode", "SidecarMode", "InteractiveMode"]


def encode(decision: Decision) -> bytes:
    return msgspec.json.encode(decision)


def lifecycle_snapshots() -> list[tuple[Snapshot, Any]]:
    """Every (snapshot, now) a K8sJobMode RayJob goes through from creation to cleanup."""
    world = World()
    seen: list[tuple[Snapshot, Any]] = []

    def step() -> None:
        seen.append((world.snapshot("RayJob", "rj"), world.now))
        world.reconcile(rayjob.reconcile, "RayJob", "rj")

    world.add(rayjob_object(finalizer=False, shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=30))
    for _ in range(3):
        step()
    cluster = world.existing("RayJob", "rj")["status"]["rayClusterName"]
    make_cluster_ready(world, cluster)
    step()
    step()
    job_id = world.existing("RayJob", "rj")["status"]["jobId"]
    world.observations[job_id] = job_info(job_id, "SUCCEEDED", end_ms=1714564810000)
    finish_submitter(world, "rj")
    step()
    world.advance(30)
    step()
    step()
    return seen


def test_same_snapshot_twice_gives_the_identical_decision() -> None:
    for snapshot, now in lifecycle_snapshots():
        first = rayjob.reconcile(snapshot, now, OperatorConfig())
        second = rayjob.reconcile(copy.deepcopy(snapshot), now, OperatorConfig())
        assert encode(first) == encode(second)


def test_replay_reproduces_generated_names() -> None:
    first, second = World(), World()
    for world in (first, second):
        world.add(rayjob_object(backoffLimit=1))
        world.reconcile(rayjob.reconcile, "RayJob", "rj")
    assert first.existing("RayJob", "rj")["status"] == second.existing("RayJob", "rj")["status"]
    other = World()
    other.add(rayjob_object())
    other.update("RayJob", "rj", lambda o: o["metadata"].update(uid="another-uid"))
    other.reconcile(rayjob.reconcile, "RayJob", "rj")
    assert (
        other.existing("RayJob", "rj")["status"]["rayClusterName"]
        != first.existing("RayJob", "rj")["status"]["rayClusterName"]
    )


@pytest.mark.parametrize("mode", [pytest.param(m, id=m) for m in MODES])
@pytest.mark.parametrize("deadline", [pytest.param(None, id="no-deadline"), pytest.param(600, id="deadline")])
def test_a_running_rayjob_with_unchanged_observations_asks_for_no_wake_up(mode: str, deadline: int | None) -> None:
    world = World()
    world.add(rayjob_object(submissionMode=mode, activeDeadlineSeconds=deadline))
    for _ in range(2):
        world.reconcile(rayjob.reconcile, "RayJob", "rj")
    make_cluster_ready(world, world.existing("RayJob", "rj")["status"]["rayClusterName"])
    world.reconcile(rayjob.reconcile, "RayJob", "rj")
    if mode == "InteractiveMode":
        world.update("RayJob", "rj", lambda o: o["spec"].update(jobId="interactive"))
        world.reconcile(rayjob.reconcile, "RayJob", "rj")
    status = world.existing("RayJob", "rj")["status"]
    assert status["jobDeploymentStatus"] == "Running"
    world.observations[status["jobId"]] = job_info(status["jobId"], "RUNNING")
    world.settle(rayjob.reconcile, "RayJob", "rj")
    for _ in range(3):  # any number of unrelated events later
        world.advance(7)
        decision = world.reconcile(rayjob.reconcile, "RayJob", "rj")
        assert decision.commands == ()
        assert decision.wake_at == (None if deadline is None else NOW + timedelta(seconds=deadline))


# -- robustness: reconcile never raises, whatever the objects look like ------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**40), max_value=2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
STAMPS = st.sampled_from([stamp(NOW - timedelta(seconds=s)) for s in (0, 1, 59, 3600, 10**6)] + ["garbage", ""])
SPEC_VALUES: dict[str, Any] = {
    "entrypoint": st.text(max_size=20),
    "runtimeEnvYAML": st.sampled_from(["", "pip: [a]", "- x", "a: [", "env_vars: {A: b}"]) | st.text(max_size=20),
    "jobId": st.sampled_from(["", "given"]),
    "metadata": st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
    "submissionMode": st.sampled_from([*MODES, "Other"]),
    "rayClusterSpec": st.just(cluster_spec()) | st.just(None) | st.just({"headGroupSpec": {}}),
    "clusterSelector": st.sampled_from([None, {"ray.io/cluster": "shared"}, {"x": ""}]),
    "submitterPodTemplate": st.sampled_from([None, {}, {"spec": {"containers": [{"name": "s", "command": ["x"]}]}}]),
    "submitterConfig": st.sampled_from([None, {"backoffLimit": 1}]),
    "shutdownAfterJobFinishes": st.booleans(),
    "ttlSecondsAfterFinished": st.integers(-5, 100),
    "activeDeadlineSeconds": st.none() | st.integers(-5, 100),
    "preRunningDeadlineSeconds": st.none() | st.integers(-5, 100),
    "backoffLimit": st.integers(-2, 3),
    "suspend": st.booleans(),
    "deletionStrategy": st.sampled_from(
        [
            None,
            {},
            {"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteWorkers"}},
            {"deletionRules": [{"condition": {"jobStatus": "FAILED", "ttlSeconds": 5}, "policy": "DeleteSelf"}]},
            {"deletionRules": [{"condition": {"jobDeploymentStatus": "Failed"}, "policy": "DeleteWorkers"}]},
        ]
    ),
    "managedBy": st.sampled_from([None, "ray.io/kuberay-operator", "kueue.x-k8s.io/multikueue"]),
    "entrypointResources": st.sampled_from(["", "{}", '{"a": 1}', "not json"]),
    "entrypointNumCpus": st.floats(min_value=0, max_value=8),
}
STATUS_VALUES: dict[str, Any] = {
    "jobDeploymentStatus": st.sampled_from(
        [
            "",
            "Initializing",
            "Running",
            "Complete",
            "Failed",
            "ValidationFailed",
            "Suspending",
            "Suspended",
            "Retrying",
            "Waiting",
            "Bogus",
        ]
    ),
    "jobStatus": st.sampled_from(["", "PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED", "WEIRD"]),
    "jobId": st.sampled_from(["", "rj-job", "x"]),
    "rayClusterName": st.sampled_from(["", "rj-cluster", "shared"]),
    "dashboardURL": st.sampled_from(["", "svc.default.svc.cluster.local:8265"]),
    "startTime": STAMPS,
    "endTime": STAMPS,
    "jobStatusCheckFailureStartTime": STAMPS,
    "failed": st.integers(-1, 5),
    "succeeded": st.integers(0, 5),
    "rayJobInfo": st.fixed_dictionaries({}, optional={"endTime": STAMPS, "startTime": STAMPS}),
    "rayClusterStatus": st.dictionaries(st.sampled_from(["state", "reason", "readyWorkerReplicas"]), JSON, max_size=2),
}
OBSERVATIONS = st.one_of(
    st.just({"http_status": 404}),
    st.just({"error": "boom", "http_status": 0}),
    st.builds(
        lambda s, e: job_info("rj-job", s, end_ms=e),
        st.sampled_from(["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED", "?"]),
        st.integers(0, 1714564800000),
    ),
    st.dictionaries(st.text(max_size=8), JSON, max_size=3),
)


def _fields(values: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={k: v | JSON for k, v in values.items()})


@st.composite
def rayjob_snapshots(draw: st.DrawFn) -> Snapshot:
    spec = {"entrypoint": "python x.py", "rayClusterSpec": cluster_spec()}
    spec.update({k: v for k, v in draw(_fields(SPEC_VALUES)).items() if v is not None})
    metadata: dict[str, Any] = {"name": "rj", "namespace": "default", "uid": "u1", "resourceVersion": "7"}
    metadata.update(
        draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "finalizers": st.sampled_from([["ray.io/rayjob-finalizer"], ["other"], "bad"]),
                    "deletionTimestamp": STAMPS,
                    "generation": st.integers(0, 5) | JSON,
                    "annotations": st.sampled_from([{"ray.io/ft-enabled": "true"}, {}, "bad"]),
                },
            )
        )
    )
    obj: dict[str, Any] = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": metadata, "spec": spec}
    if draw(st.booleans()):
        obj["status"] = draw(_fields(STATUS_VALUES))
    if draw(st.integers(0, 9)) == 0:
        obj[draw(st.sampled_from(["spec", "metadata", "status"]))] = draw(JSON)
    entries: dict[str, dict[str, Any]] = {"RayJob": {"rj": obj}}
    cluster_name = draw(st.sampled_from(["rj-cluster", "shared"]))
    if draw(st.booleans()):
        cluster: dict[str, Any] = {
            "kind": "RayCluster",
            "metadata": {"name": cluster_name, "uid": "c1"},
            "spec": cluster_spec(),
            "status": {"state": draw(st.sampled_from(["", "ready"]))},
        }
        if draw(st.booleans()):
            cluster[draw(st.sampled_from(["spec", "status", "metadata"]))] = draw(JSON)
        entries["RayCluster"] = {cluster_name: cluster}
        entries["Service"] = {
            f"{cluster_name}-head-svc": {
                "spec": {"ports": draw(st.sampled_from([[{"name": "dashboard", "port": 8265}], [], "bad"]))}
            }
        }
        entries["Pod"] = {
            "head": {
                "metadata": {"labels": {"ray.io/cluster": cluster_name, "ray.io/node-type": "head"}},
                "status": draw(
                    st.sampled_from(
                        [
                            {},
                            {
                                "containerStatuses": [
                                    {"name": "ray-job-submitter", "state": {"terminated": {"exitCode": 1}}}
                                ]
                            },
                        ]
                    )
                ),
            }
        }
    if draw(st.booleans()):
        entries["Job"] = {
            "rj": {
                "status": {
                    "conditions": draw(
                        st.sampled_from(
                            [
                                [],
                                [{"type": "Failed", "status": "True"}],
                                [{"type": "Complete", "status": "True", "lastTransitionTime": "x"}],
                                "bad",
                            ]
                        )
                    )
                }
            }
        }
    if draw(st.booleans()):
        entries[OBS_RAY_JOB] = {draw(st.sampled_from(["rj-job", "x"])): draw(OBSERVATIONS)}
    return Snapshot(key=ReconcileKey(kind="RayJob", namespace="default", name="rj"), entries=entries)


CONFIGS = st.builds(
    lambda deletion, restart, cron: OperatorConfig(
        gates=FeatureGates(ray_job_deletion_policy=deletion, sidecar_submitter_restart=restart, ray_cron_job=cron)
    ),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=rayjob_snapshots(), config=CONFIGS, offset=st.integers(0, 10**6))
def test_rayjob_reconcile_never_raises(snapshot: Snapshot, config: OperatorConfig, offset: int) -> None:
    now = NOW + timedelta(seconds=offset)
    decision = guarded(rayjob.reconcile)(snapshot, now, config)
    assert decision.wake_at is None or decision.wake_at > now
    msgspec.json.encode(decision)  # everything in it can travel on the bus


CRON_VALUES: dict[str, Any] = {
    "schedule": st.sampled_from(["* * * * *", "@hourly", "0 0 30 2 *", "bad", "TZ=x * * * *", "*/5 1-3 * * mon"]),
    "timeZone": st.sampled_from([None, "", "Asia/Taipei", "Nowhere/City", "UTC"]),
    "suspend": st.booleans(),
    "concurrencyPolicy": st.sampled_from(["Allow", "Forbid", "Replace", "Sometimes"]),
    "successfulJobsHistoryLimit": st.none() | st.integers(-1, 3),
    "failedJobsHistoryLimit": st.none() | st.integers(-1, 3),
    "jobTemplate": st.just({"entrypoint": "x", "rayClusterSpec": cluster_spec(), "shutdownAfterJobFinishes": True})
    | st.just({}),
}


@settings(max_examples=300, deadline=None)
@given(
    spec=_fields(CRON_VALUES),
    status=st.fixed_dictionaries({}, optional={"lastScheduleTime": STAMPS | JSON}),
    children=st.lists(
        st.fixed_dictionaries(
            {"jobDeploymentStatus": st.sampled_from(["", "Running", "Complete", "Failed", "ValidationFailed"])},
            optional={"annotated": STAMPS, "owner": st.sampled_from(["u1", "other"])},
        ),
        max_size=4,
    ),
    offset=st.integers(0, 10**7),
    name=st.sampled_from(["nightly", "x" * 40]),
)
def test_raycronjob_reconcile_never_raises(
    spec: dict[str, Any], status: dict[str, Any], children: list[dict[str, Any]], offset: int, name: str
) -> None:
    obj = {
        "kind": "RayCronJob",
        "metadata": {"name": name, "uid": "u1", "resourceVersion": "3", "creationTimestamp": stamp(NOW)},
        "spec": {"schedule": "* * * * *", "jobTemplate": {}, **{k: v for k, v in spec.items() if v is not None}},
        "status": status,
    }
    jobs: dict[str, Any] = {}
    for index, child in enumerate(children):
        metadata: dict[str, Any] = {
            "name": f"{name}-{index}",
            "uid": f"c{index}",
            "labels": {"ray.io/cronjob-name": name},
        }
        if "annotated" in child:
            metadata["annotations"] = {"ray.io/cronjob-scheduled-timestamp": child["annotated"]}
        if "owner" in child:
            metadata["ownerReferences"] = [{"uid": child["owner"], "controller": True}]
        jobs[metadata["name"]] = {"metadata": metadata, "status": {"jobDeploymentStatus": child["jobDeploymentStatus"]}}
    snapshot = Snapshot(
        key=ReconcileKey(kind="RayCronJob", namespace="default", name=name),
        entries={"RayCronJob": {name: obj}, "RayJob": jobs},
    )
    now = NOW + timedelta(seconds=offset)
    config = OperatorConfig(gates=FeatureGates(ray_cron_job=True))
    decision = raycronjob.reconcile(snapshot, now, config)
    assert decision.wake_at is None or decision.wake_at >= now
    msgspec.json.encode(decision)


def test_probe_target_follows_the_running_state() -> None:
    world = World()
    world.add(rayjob_object(submissionMode="HTTPMode"))
    for _ in range(2):
        world.reconcile(rayjob.reconcile, "RayJob", "rj")
    cluster_name = world.existing("RayJob", "rj")["status"]["rayClusterName"]
    assert snapshot_targets(world.snapshot("RayJob", "rj")) == []  # Initializing
    make_cluster_ready(world, cluster_name)
    world.reconcile(rayjob.reconcile, "RayJob", "rj")
    obj = world.existing("RayJob", "rj")
    [target] = snapshot_targets(world.snapshot("RayJob", "rj"))
    job_id = obj["status"]["jobId"]
    assert (target.key.name, target.entry_name, target.path) == ("rj", job_id, f"/api/jobs/{job_id}")
    assert target.dashboard is not None
    assert (target.dashboard.service, target.dashboard.port, target.dashboard.cluster) == (
        f"{cluster_name}-head-svc",
        8265,
        cluster_name,
    )
