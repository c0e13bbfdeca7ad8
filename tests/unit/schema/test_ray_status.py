"""Statuses as KubeRay's operator writes them decode and re-encode unchanged (what raybus writes through
the status subresource must read back the same)."""

from __future__ import annotations

from typing import Any

import pytest

from schema.ray import decode_ray_object, to_builtins

CONDITION = {
    "type": "HeadPodReady",
    "status": "True",
    "reason": "HeadPodRunningAndReady",
    "message": "",
    "lastTransitionTime": "2025-01-02T03:04:05Z",
    "observedGeneration": 1,
}
CLUSTER_STATUS = {
    "state": "ready",
    "desiredCPU": "3",
    "desiredMemory": "7Gi",
    "desiredGPU": "0",
    "desiredTPU": "0",
    "lastUpdateTime": "2025-01-02T03:04:06Z",
    "stateTransitionTimes": {"ready": "2025-01-02T03:04:06Z"},
    "endpoints": {"client": "10001", "dashboard": "8265", "gcs-server": "6379", "metrics": "8080"},
    "head": {"podIP": "10.0.0.5", "podName": "c-head-abcde", "serviceIP": "10.0.0.5", "serviceName": "c-head-svc"},
    "conditions": [CONDITION],
    "readyWorkerReplicas": 2,
    "availableWorkerReplicas": 2,
    "desiredWorkerReplicas": 2,
    "minWorkerReplicas": 1,
    "maxWorkerReplicas": 5,
    "observedGeneration": 1,
}
HEAD = {"template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}}}


def _object(kind: str, spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": "x"}, "spec": spec, "status": status}


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(_object("RayCluster", {"headGroupSpec": HEAD}, CLUSTER_STATUS), id="raycluster"),
        pytest.param(
            _object(
                "RayJob",
                {"entrypoint": "python x.py", "rayClusterSpec": {"headGroupSpec": HEAD}},
                {
                    "jobId": "rayjob-sample-x7k2p",
                    "rayClusterName": "rayjob-sample-raycluster-abcde",
                    "dashboardURL": "rayjob-sample-raycluster-abcde-head-svc.default.svc.cluster.local:8265",
                    "jobStatus": "SUCCEEDED",
                    "jobDeploymentStatus": "Complete",
                    "reason": "",
                    "message": "Job finished successfully.",
                    "startTime": "2025-01-02T03:04:05Z",
                    "endTime": "2025-01-02T03:06:05Z",
                    "succeeded": 1,
                    "failed": 0,
                    "rayJobInfo": {"startTime": "2025-01-02T03:05:00Z", "endTime": "2025-01-02T03:06:00Z"},
                    "rayClusterStatus": CLUSTER_STATUS,
                    "observedGeneration": 1,
                },
            ),
            id="rayjob",
        ),
        pytest.param(
            _object(
                "RayService",
                {"rayClusterConfig": {"headGroupSpec": HEAD}, "serveConfigV2": "applications: []"},
                {
                    "serviceStatus": "Running",
                    "numServeEndpoints": 1,
                    "conditions": [{**CONDITION, "type": "Ready", "reason": "NonZeroServeEndpoints"}],
                    "lastUpdateTime": "2025-01-02T03:04:06Z",
                    "observedGeneration": 2,
                    "activeServiceStatus": {
                        "rayClusterName": "rayservice-sample-abcde",
                        "rayClusterStatus": CLUSTER_STATUS,
                        "targetCapacity": 100,
                        "trafficRoutedPercent": 100,
                        "lastTrafficMigratedTime": "2025-01-02T03:04:06Z",
                        "applicationStatuses": {
                            "fruit_app": {
                                "status": "RUNNING",
                                "serveDeploymentStatuses": {"MangoStand": {"status": "HEALTHY"}},
                            }
                        },
                    },
                    "pendingServiceStatus": {},
                },
            ),
            id="rayservice",
        ),
        pytest.param(
            _object(
                "RayCronJob",
                {"schedule": "* * * * *", "jobTemplate": {"entrypoint": "python x.py"}},
                {"lastScheduleTime": "2025-01-02T03:04:00Z"},
            ),
            id="raycronjob",
        ),
    ],
)
def test_status_round_trips(obj: dict[str, Any]) -> None:
    typed = decode_ray_object(obj)
    out = to_builtins(typed)
    # Zero values are omitted on encode, as Go's omitempty does.
    expected = _without_zero(obj["status"])
    assert _without_zero(out["status"]) == expected
    assert decode_ray_object(out) == typed


def _without_zero(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: _without_zero(v) for k, v in value.items()}
        # A condition's message is required (metav1.Condition always writes it), so it stays even if empty.
        return {k: v for k, v in kept.items() if v not in ("", 0, {}, None) or k == "message"}
    if isinstance(value, list):
        return [_without_zero(v) for v in value]
    return value
