"""Which reason a failed command shows on its custom resource, and how ReplicaFailure is set."""

from __future__ import annotations

import pytest

from schema.messages import Command, CreateObject, DeleteCollection, DeleteObject, EmitEvent, ObjectRef, PatchStatus
from services.edge.apply.failures import failure_reasons, replica_failure


def pod(name: str) -> ObjectRef:
    return ObjectRef(api_version="v1", kind="Pod", namespace="ns", name=name)


def create_pod(name: str, role: str) -> CreateObject:
    return CreateObject(target=pod(name), body={"metadata": {"name": name, "labels": {"ray.io/node-type": role}}})


@pytest.mark.parametrize(
    ("kind", "command", "expected"),
    [
        ("RayCluster", create_pod("c-head-x", "head"), ("FailedToCreateHeadPod", "FailedCreateHeadPod")),
        ("RayCluster", create_pod("c-w-1", "worker"), ("FailedToCreateWorkerPod", "FailedCreateWorkerPod")),
        ("RayCluster", DeleteObject(target=pod("c-head-x")), ("FailedToDeleteHeadPod", "FailedDeleteHeadPod")),
        ("RayCluster", DeleteObject(target=pod("c-w-1")), ("FailedToDeleteWorkerPod", "FailedDeleteWorkerPod")),
        (
            "RayCluster",
            DeleteCollection(api_version="v1", kind="Pod", namespace="ns", label_selector="ray.io/cluster=c"),
            ("FailedToDeletePodCollection", "FailedDeleteAllPods"),
        ),
        ("RayJob", create_pod("c-w-1", "worker"), ("FailedToCreateWorkerPod", "")),
        (
            "RayJob",
            CreateObject(target=ObjectRef(api_version="batch/v1", kind="Job", namespace="ns", name="j"), body={}),
            ("FailedToCreateJob", ""),
        ),
        ("RayCluster", PatchStatus(target=pod("c"), status={}), ("FailedToUpdateStatus", "")),
        ("RayCluster", EmitEvent(regarding=pod("c"), event_type="Normal", reason="R", message="m"), ("", "")),
        ("RayCluster", None, ("FailedToApplyDecision", "")),
    ],
)
def test_failure_reasons(kind: str, command: Command | None, expected: tuple[str, str]) -> None:
    assert failure_reasons(kind, "c", command) == expected


def test_replica_failure_is_set_in_place_and_keeps_its_transition_time() -> None:
    ready = {"type": "HeadPodReady", "status": "True"}
    first = replica_failure([ready], reason="FailedCreateWorkerPod", message="a", now="T1")
    assert first == [
        ready,
        {**first[1], "status": "True", "reason": "FailedCreateWorkerPod", "lastTransitionTime": "T1"},
    ]
    again = replica_failure(first, reason="FailedDeleteWorkerPod", message="b", now="T2")
    assert [c["type"] for c in again] == ["HeadPodReady", "ReplicaFailure"]
    assert again[1]["lastTransitionTime"] == "T1" and again[1]["message"] == "b"
