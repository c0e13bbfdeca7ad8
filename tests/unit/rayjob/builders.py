"""Object builders for RayJob tests, and the bits of other actors the tests play (the RayCluster
controller making a cluster ready, the Job controller finishing the submitter, the dashboard prober)."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from tests.unit.apiserver import NAMESPACE
from tests.unit.rayjob.sim import World, stamp

IMAGE = "rayproject/ray:2.52.0"


def cluster_spec(*, workers: int = 1, ray_version: str = "2.52.0") -> dict[str, Any]:
    """A small valid RayClusterSpec."""
    return {
        "rayVersion": ray_version,
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "ray-head",
                            "image": IMAGE,
                            "ports": [
                                {"containerPort": 6379, "name": "gcs-server"},
                                {"containerPort": 8265, "name": "dashboard"},
                                {"containerPort": 10001, "name": "client"},
                            ],
                        }
                    ]
                }
            },
        },
        "workerGroupSpecs": [
            {
                "groupName": "small-group",
                "replicas": workers,
                "minReplicas": 1,
                "maxReplicas": 5,
                "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-worker", "image": IMAGE}]}},
            }
        ],
    }


def rayjob(
    name: str = "rj", *, status: dict[str, Any] | None = None, finalizer: bool = True, **spec: Any
) -> dict[str, Any]:
    """A RayJob object (not yet stored); ``spec`` keys are camelCase RayJob spec fields."""
    body: dict[str, Any] = {"entrypoint": "python /home/ray/samples/sample_code.py", "rayClusterSpec": cluster_spec()}
    body.update(spec)
    for key in [k for k, v in body.items() if v is None]:
        del body[key]
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if finalizer:
        metadata["finalizers"] = ["ray.io/rayjob-finalizer"]
    obj: dict[str, Any] = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": metadata, "spec": body}
    if status is not None:
        obj["status"] = copy.deepcopy(status)
    return obj


def make_cluster_ready(world: World, name: str, *, head_service: str | None = None) -> None:
    """Play the RayCluster controller: head Service (dashboard port), head pod, ``state: ready``."""
    cluster = world.get("RayCluster", name)
    assert cluster is not None, f"RayCluster {name} does not exist"
    owner = [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "name": name,
            "uid": cluster["metadata"]["uid"],
            "controller": True,
        }
    ]
    svc_name = head_service or f"{name}-head-svc"
    if world.get("Service", svc_name) is None:
        world.add(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": svc_name, "labels": {"ray.io/cluster": name}, "ownerReferences": owner},
                "spec": {
                    "clusterIP": "None",
                    "selector": {"ray.io/cluster": name, "ray.io/node-type": "head"},
                    "ports": [{"name": "dashboard", "port": 8265}, {"name": "client", "port": 10001}],
                },
            }
        )
    head = f"{name}-head-abcde"
    if world.get("Pod", head) is None:
        containers = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
        world.add(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": head,
                    "labels": {"ray.io/cluster": name, "ray.io/node-type": "head"},
                    "ownerReferences": owner,
                },
                "spec": {"containers": copy.deepcopy(containers)},
                "status": {
                    "phase": "Running",
                    "containerStatuses": [{"name": c["name"], "state": {"running": {}}} for c in containers],
                },
            }
        )
    world.set_status("RayCluster", name, {"state": "ready", "readyWorkerReplicas": 1, "availableWorkerReplicas": 1})


def finish_submitter(
    world: World,
    name: str,
    *,
    succeeded: bool = True,
    at: datetime | None = None,
    reason: str = "BackoffLimitExceeded",
    message: str = "Job has reached the specified backoff limit",
) -> None:
    """Play the Job controller: the submitter Job gets a Complete or Failed condition."""
    when = stamp(at or world.now)
    condition: dict[str, Any] = {
        "type": "Complete" if succeeded else "Failed",
        "status": "True",
        "lastTransitionTime": when,
    }
    if not succeeded:
        condition.update(reason=reason, message=message)
    world.set_status("Job", name, {"conditions": [condition]})


def terminate_sidecar(
    world: World, cluster: str, *, exit_code: int, at: datetime | None = None, reason: str = "Error"
) -> None:
    """Play the kubelet: the SidecarMode submitter container in the head pod terminates."""
    pod = next(p for p in world.of_kind("Pod") if p["metadata"]["labels"].get("ray.io/cluster") == cluster)

    def mutate(obj: dict[str, Any]) -> None:
        for status in obj["status"]["containerStatuses"]:
            if status["name"] == "ray-job-submitter":
                status["state"] = {
                    "terminated": {"exitCode": exit_code, "reason": reason, "finishedAt": stamp(at or world.now)}
                }

    world.update("Pod", pod["metadata"]["name"], mutate)


def job_info(
    job_id: str, status: str, *, start_ms: int = 1714564800000, end_ms: int = 0, message: str = ""
) -> dict[str, Any]:
    """A dashboard ``GET /api/jobs/<id>`` body."""
    body: dict[str, Any] = {
        "job_id": None,
        "submission_id": job_id,
        "status": status,
        "message": message,
        "start_time": start_ms,
        "end_time": end_ms,
        "entrypoint": "python x.py",
    }
    return body


def status_of(world: World, name: str = "rj") -> dict[str, Any]:
    """The RayJob's status."""
    obj = world.get("RayJob", name)
    assert obj is not None
    status: dict[str, Any] = obj.get("status") or {}
    return status
