"""``statusonly``: which change is a change of the key's own custom resource in its status alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from schema.keys import ReconcileKey
from services.edge.watch.statusonly import status_only

KEY = ReconcileKey(kind="RayCluster", namespace="ns", name="rc")
BEFORE: dict[str, Any] = {
    "apiVersion": "ray.io/v1",
    "kind": "RayCluster",
    "metadata": {"name": "rc", "namespace": "ns", "resourceVersion": "5", "generation": 1, "labels": {"a": "b"}},
    "spec": {"workerGroupSpecs": [{"groupName": "g", "replicas": 1}]},
    "status": {"state": "", "readyWorkerReplicas": 0},
}


def changed(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    after = copy.deepcopy(BEFORE)
    after["metadata"]["resourceVersion"] = "6"
    target = after
    for step in path[:-1]:
        target = target.setdefault(step, {})
    target[path[-1]] = value
    return after


def test_a_new_status_and_resource_version_is_a_status_change_alone() -> None:
    assert status_only(KEY, "RayCluster", BEFORE, changed(("status", "state"), "ready"))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "workerGroupSpecs"), [{"groupName": "g", "replicas": 2}]),
        (("metadata", "generation"), 2),
        (("metadata", "labels"), {"a": "c"}),
        (("metadata", "annotations"), {"x": "y"}),
        (("metadata", "finalizers"), ["ray.io/gcs-ft-redis-cleanup-finalizer"]),
        (("metadata", "deletionTimestamp"), "2026-01-01T00:00:00Z"),
    ],
)
def test_anything_else_that_changed_makes_it_an_ordinary_change(path: tuple[str, ...], value: Any) -> None:
    after = changed(path, value)
    after["status"]["state"] = "ready"
    assert not status_only(KEY, "RayCluster", BEFORE, after)


def test_only_the_keys_own_custom_resource_counts() -> None:
    after = changed(("status", "state"), "ready")
    assert not status_only(ReconcileKey(kind="RayJob", namespace="ns", name="rc"), "RayCluster", BEFORE, after)
    assert not status_only(ReconcileKey(kind="RayCluster", namespace="ns", name="other"), "RayCluster", BEFORE, after)
    assert not status_only(ReconcileKey(kind="RayCluster", namespace="other", name="rc"), "RayCluster", BEFORE, after)
