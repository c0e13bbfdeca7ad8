"""docs/behaviour.md#4.5 / #1.2: each status field and condition reason."""

from __future__ import annotations

from typing import Any

import pytest

from schema.config import FeatureGates
from schema.ray import RayClusterSpec, decode_as
from services.reconciler.raycluster.pod_census import PodInfo
from services.reconciler.raycluster.quantity import format_quantity, parse_quantity
from services.reconciler.raycluster.resources import desired_resources
from services.reconciler.raycluster.status import head_pod_ready_condition
from tests.unit.raycluster import builders
from tests.unit.raycluster.sim import World


def conditions(world: World) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in world.cluster["status"].get("conditions", [])}


def head_name(world: World) -> str:
    heads = [p["metadata"]["name"] for p in world.pods() if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
    return str(heads[0])


def worker_names(world: World) -> list[str]:
    return [p["metadata"]["name"] for p in world.pods() if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]


def test_ready_vs_available_workers() -> None:
    world = World(builders.cluster(groups=[builders.group(replicas=3)]))
    world.converge()
    a, b, _ = worker_names(world)
    world.set_pod(a, phase="Running", ready=False)
    world.set_pod(b, phase="Pending", ready=False)
    world.step()
    status = world.cluster["status"]
    assert (status["readyWorkerReplicas"], status["availableWorkerReplicas"]) == (1, 2)
    assert status["state"] == "ready"  # sticky


def test_replica_counts_with_hosts_and_suspended_groups() -> None:
    groups = [
        builders.group("a", replicas=2, min_replicas=1, max_replicas=4, num_of_hosts=2),
        builders.group("b", replicas=9, min_replicas=0, max_replicas=3),
        builders.group("c", replicas=1, min_replicas=1, max_replicas=2, suspend=True),
    ]
    world = World(builders.cluster(groups=groups))
    world.converge()
    status = world.cluster["status"]
    assert status["desiredWorkerReplicas"] == 4 + 3
    assert status["minWorkerReplicas"] == 2
    assert status["maxWorkerReplicas"] == 8 + 3


def test_max_saturates_at_int32() -> None:
    world = World(builders.cluster(groups=[builders.group("a", max_replicas=2**31 - 1), builders.group("b")]))
    world.converge()
    assert world.cluster["status"]["maxWorkerReplicas"] == 2**31 - 1


def test_desired_resources_quantities() -> None:
    obj = builders.cluster(
        groups=[
            builders.group("cpu", replicas=3, min_replicas=0, max_replicas=1),  # raw replicas, not clamped
            builders.group(
                "gpu",
                replicas=2,
                num_of_hosts=2,
                template={
                    "spec": {
                        "containers": [
                            {
                                "name": "w",
                                "image": "ray",
                                "resources": {
                                    "requests": {"cpu": "500m"},
                                    "limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": 1, "google.com/tpu": "4"},
                                },
                            },
                            {"name": "side", "image": "x", "resources": {"limits": {"amd.com/gpu": "1"}}},
                        ]
                    }
                },
            ),
        ]
    )
    world = World(obj)
    world.converge()
    status = world.cluster["status"]
    # head 1 cpu / 2Gi; cpu group 3 x (1, 1Gi); gpu group 2 x 2 hosts x (500m, 1Gi, 1 nvidia + 1 amd, 4 TPU)
    assert status["desiredCPU"] == "6"
    assert status["desiredMemory"] == "9Gi"
    assert status["desiredGPU"] == "8"
    assert status["desiredTPU"] == "16"


def test_desired_resources_defaults_to_zero() -> None:
    spec = decode_as(
        {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h", "image": "i"}]}}}}, RayClusterSpec
    )
    totals = desired_resources(spec)
    assert (totals.cpu, totals.memory, totals.gpu, totals.tpu) == ("0", "0", "0", "0")


@pytest.mark.parametrize(
    ("raw", "printed"),
    [
        pytest.param("500m", "500m", id="milli"),
        pytest.param("1.5", "1500m", id="fraction"),
        pytest.param("5Gi", "5Gi", id="binary"),
        pytest.param("1536Mi", "1536Mi", id="binary-mixed"),
        pytest.param("40G", "40G", id="decimal-si"),
        pytest.param("0.5Gi", "512Mi", id="binary-fraction"),
        pytest.param("100", "100", id="plain"),
        pytest.param("1e3", "1e3", id="exponent"),
        pytest.param(512, "512", id="int"),
    ],
)
def test_quantity_printing(raw: object, printed: str) -> None:
    assert format_quantity(parse_quantity(raw)) == printed


def test_quantity_sum_keeps_first_format() -> None:
    total = parse_quantity("1Gi").add(parse_quantity("1G"))
    assert str(total) == "2073741824"  # binary format, not a multiple of 1024 → decimal SI
    assert str(parse_quantity("2Gi").add(parse_quantity("1024Mi"))) == "3Gi"
    assert parse_quantity("500m").ceil() == 1


def test_endpoints_and_head_info() -> None:
    world = World(builders.cluster())
    world.converge()
    status = world.cluster["status"]
    assert status["endpoints"] == {
        "client": "10001",
        "dashboard": "8265",
        "gcs-server": "6379",
        "metrics": "8080",
        "serve": "8000",
    }
    head = world.objects[("Pod", head_name(world))]
    assert status["head"] == {
        "podIP": head["status"]["podIP"],
        "podName": head["metadata"]["name"],
        "serviceIP": head["status"]["podIP"],  # headless: the head pod's IP
        "serviceName": "rc-head-svc",
    }


def test_endpoints_prefer_node_port_and_cluster_ip() -> None:
    obj = builders.cluster()
    obj["spec"]["headGroupSpec"]["serviceType"] = "NodePort"
    world = World(obj)
    world.converge()
    svc = world.objects[("Service", "rc-head-svc")]
    svc["spec"]["clusterIP"] = "10.0.0.99"
    next(p for p in svc["spec"]["ports"] if p["name"] == "metrics")["nodePort"] = 30001
    world.step()
    status = world.cluster["status"]
    assert status["endpoints"]["metrics"] == "30001"
    assert status["head"]["serviceIP"] == "10.0.0.99"


def test_provisioning_then_provisioned_and_sticky() -> None:
    world = World(builders.cluster())
    world.step()
    world.step()  # pods Pending, head Service now visible
    cond = conditions(world)
    assert cond["RayClusterProvisioned"]["status"] == "False"
    assert cond["RayClusterProvisioned"]["reason"] == "RayClusterPodsProvisioning"
    assert cond["HeadPodReady"]["status"] == "False"
    assert "state" not in world.cluster["status"]
    world.settle()
    world.step()
    cond = conditions(world)
    assert cond["RayClusterProvisioned"]["reason"] == "AllPodRunningAndReadyFirstTime"
    assert cond["RayClusterSuspended"]["status"] == "False"
    assert cond["RayClusterSuspending"]["status"] == "False"
    provisioned_at = cond["RayClusterProvisioned"]["lastTransitionTime"]
    world.advance(60)
    world.set_pod(worker_names(world)[0], phase="Running", ready=False)
    world.step()
    cond = conditions(world)
    assert cond["RayClusterProvisioned"]["status"] == "True"  # stays True
    assert cond["RayClusterProvisioned"]["lastTransitionTime"] == provisioned_at
    assert world.cluster["status"]["state"] == "ready"


def _info(status: dict[str, Any]) -> PodInfo:
    return PodInfo(
        name="h",
        node_type="head",
        group="headgroup",
        phase="Running",
        ready="",
        terminating=False,
        restart_never=False,
        obj={"status": status},
    )


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(
            {"conditions": [{"type": "Ready", "status": "True"}]}, ("True", "HeadPodRunningAndReady", ""), id="ready"
        ),
        pytest.param({}, ("False", "Unknown", ""), id="no-ready-condition"),
        pytest.param(
            {"conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "message": "m"}]},
            ("False", "PodCompleted", "m"),
            id="reason-copied",
        ),
        pytest.param(
            {
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "not ready"}
                ],
                "containerStatuses": [
                    {"name": "ray-head", "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}
                ],
            },
            ("False", "CrashLoopBackOff", "not ready; ray-head: back-off"),
            id="containers-not-ready",
        ),
    ],
)
def test_head_pod_ready_condition(status: dict[str, Any], expected: tuple[str, str, str]) -> None:
    assert head_pod_ready_condition(_info(status)) == expected


def test_head_pod_not_found() -> None:
    assert head_pod_ready_condition(None) == ("False", "HeadPodNotFound", "Head Pod not found")
    world = World(builders.cluster(annotations={"ray.io/disable-provisioned-head-restart": "true"}))
    world.converge()
    del world.objects[("Pod", head_name(world))]
    world.step()
    assert conditions(world)["HeadPodReady"]["reason"] == "HeadPodNotFound"


def test_replica_failure_condition_removed_without_error() -> None:
    world = World(builders.cluster())
    world.converge()
    world.cluster["status"]["conditions"].append(
        {
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreateWorkerPod",
            "message": "x",
            "lastTransitionTime": "2025-01-01T00:00:00Z",
        }
    )
    decision = world.step()
    assert "ReplicaFailure" not in conditions(world)
    transitions = [t for t in decision.transitions() if t.field == "condition/ReplicaFailure"]
    assert [(t.from_value, t.to_value) for t in transitions] == [("True", "")]


def test_no_conditions_without_gate() -> None:
    world = World(builders.cluster(), config=builders.config(gates=FeatureGates(ray_cluster_status_conditions=False)))
    world.converge()
    assert "conditions" not in world.cluster["status"]
    assert world.cluster["status"]["state"] == "ready"


def test_state_not_ready_while_pod_count_differs() -> None:
    world = World(builders.cluster(groups=[builders.group(replicas=2)]))
    world.step()
    world.settle()
    world.objects.pop(("Pod", worker_names(world)[0]))
    decision = world.step(apply=False)
    assert "4.2/scale-up:workers+1" in decision.rules
    world.apply(decision)
    assert "state" not in world.cluster["status"]


def test_observed_generation_and_last_update_time_ride_along() -> None:
    world = World(builders.cluster())
    world.converge()
    world.update_spec(lambda s: s["workerGroupSpecs"][0].update(replicas=3))
    world.advance(5)
    world.converge()
    status = world.cluster["status"]
    assert status["observedGeneration"] == 2
    assert status["lastUpdateTime"] == "2025-03-01T12:00:05Z"
