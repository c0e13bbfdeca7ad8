"""Cleanup after Complete/Failed (docs/behaviour.md#5.6): every policy with its TTL, and the rules' ordering."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest

from schema.config import OperatorConfig
from schema.messages import DeleteObject, PatchObject, PatchStatus
from services.reconciler.rayjob import reconcile
from tests.unit.rayjob.builders import cluster_spec, finish_submitter, job_info, make_cluster_ready, rayjob, status_of
from tests.unit.rayjob.sim import World

RULES = [
    {"condition": {"jobStatus": "FAILED", "ttlSeconds": 30}, "policy": "DeleteWorkers"},
    {"condition": {"jobStatus": "FAILED", "ttlSeconds": 60}, "policy": "DeleteCluster"},
    {"condition": {"jobStatus": "FAILED", "ttlSeconds": 90}, "policy": "DeleteSelf"},
    {"condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 30}, "policy": "DeleteWorkers"},
    {"condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 60}, "policy": "DeleteCluster"},
    {"condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 90}, "policy": "DeleteSelf"},
]


def step(world: World) -> Any:
    return world.reconcile(reconcile, "RayJob", "rj")


def finish(world: World, ray_status: str, **spec: Any) -> str:
    """Run a RayJob (HTTPMode: no submitter to wait for) until Ray reports ``ray_status``."""
    world.add(rayjob(submissionMode="HTTPMode", **spec))
    step(world)
    step(world)
    cluster = status_of(world)["rayClusterName"]
    make_cluster_ready(world, cluster)
    step(world)
    job_id = status_of(world)["jobId"]
    world.observations[job_id] = job_info(job_id, ray_status, end_ms=1714564900000)
    step(world)
    assert status_of(world)["jobDeploymentStatus"] in ("Complete", "Failed")
    return str(cluster)


def deletes(decision: Any) -> list[tuple[str, str]]:
    return [(c.target.kind, c.target.name) for c in decision.commands if isinstance(c, DeleteObject)]


def test_shutdown_after_job_finishes_waits_for_the_ttl() -> None:
    world = World()
    cluster = finish(world, "SUCCEEDED", shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=600)
    end = world.now
    decision = step(world)
    assert decision.commands == () and decision.wake_at == end + timedelta(seconds=600)
    world.advance(599)
    assert step(world).wake_at == end + timedelta(seconds=600)
    world.advance(1)
    decision = step(world)
    assert deletes(decision) == [("RayCluster", cluster)]
    assert [c.reason for c in decision.commands if hasattr(c, "reason")] == ["DeletedRayCluster"]
    assert world.get("RayCluster", cluster) is None
    quiet = step(world)
    assert quiet.commands == () and quiet.wake_at is None


def test_shutdown_keeps_the_submitter_job() -> None:
    world = World()
    world.add(rayjob(shutdownAfterJobFinishes=True))
    step(world)
    step(world)
    cluster = status_of(world)["rayClusterName"]
    make_cluster_ready(world, cluster)
    step(world)
    job_id = status_of(world)["jobId"]
    world.observations[job_id] = job_info(job_id, "SUCCEEDED", end_ms=1714564900000)
    finish_submitter(world, "rj")
    step(world)
    decision = step(world)
    assert deletes(decision) == [("RayCluster", cluster)]
    assert world.get("Job", "rj") is not None


def test_delete_rayjob_cr_after_job_finishes() -> None:
    switches = msgspec.structs.replace(OperatorConfig().switches, delete_rayjob_cr_after_job_finishes=True)
    world = World(config=OperatorConfig(switches=switches))
    finish(world, "FAILED", shutdownAfterJobFinishes=True)
    decision = step(world)
    assert deletes(decision) == [("RayJob", "rj")]


def test_no_policy_means_no_cleanup() -> None:
    world = World()
    cluster = finish(world, "SUCCEEDED")
    world.advance(10_000)
    decision = step(world)
    assert decision.commands == () and decision.wake_at is None
    assert world.get("RayCluster", cluster) is not None


@pytest.mark.parametrize(
    ("ray_status", "expected"),
    [
        pytest.param("SUCCEEDED", "DeleteCluster", id="on-success-delete-cluster"),
        pytest.param("FAILED", "DeleteWorkers", id="on-failure-delete-workers"),
    ],
)
def test_legacy_policies(ray_status: str, expected: str) -> None:
    world = World()
    strategy = {"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteWorkers"}}
    cluster = finish(
        world, ray_status, deletionStrategy=strategy, shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=10
    )
    decision = step(world)
    assert decision.wake_at == world.now + timedelta(seconds=10)
    world.advance(10)
    decision = step(world)
    if expected == "DeleteCluster":
        assert deletes(decision) == [("RayCluster", cluster)]
    else:
        (patch,) = [c for c in decision.commands if isinstance(c, PatchObject)]
        assert patch.patch == [{"op": "add", "path": "/spec/workerGroupSpecs/0/suspend", "value": True}]
        assert world.existing("RayCluster", cluster)["spec"]["workerGroupSpecs"][0]["suspend"] is True
    assert step(world).commands == ()


def test_legacy_delete_none_does_nothing() -> None:
    world = World()
    strategy = {"onSuccess": {"policy": "DeleteNone"}, "onFailure": {"policy": "DeleteNone"}}
    finish(world, "SUCCEEDED", deletionStrategy=strategy)
    decision = step(world)
    assert decision.commands == () and "5.6/legacy-nothing" in decision.rules


def test_deletion_rules_run_in_ttl_order() -> None:
    world = World()
    cluster = finish(world, "FAILED", deletionStrategy={"deletionRules": RULES})
    end = world.now
    decision = step(world)
    assert decision.commands == () and decision.wake_at == end + timedelta(seconds=30)
    world.advance_to(decision.wake_at)
    decision = step(world)
    assert isinstance(decision.commands[0], PatchObject)
    assert decision.wake_at == end + timedelta(seconds=60)
    assert step(world).commands == ()  # workers suspended: that rule is done
    world.advance_to(end + timedelta(seconds=60))
    decision = step(world)
    assert deletes(decision) == [("RayCluster", cluster)]
    assert decision.wake_at == end + timedelta(seconds=90)
    world.advance_to(end + timedelta(seconds=90))
    decision = step(world)
    assert deletes(decision) == [("RayJob", "rj")]
    assert world.get("RayJob", "rj") is not None  # the finalizer holds it for the stop-job step
    assert step(world).rules == ("5.1/deleting-remove-finalizer",)
    assert world.get("RayJob", "rj") is None


def test_deletion_rules_run_the_most_impactful_overdue_rule_first() -> None:
    world = World()
    finish(world, "SUCCEEDED", deletionStrategy={"deletionRules": RULES})
    world.advance(1000)  # every rule is overdue at once
    decision = step(world)
    assert deletes(decision) == [("RayJob", "rj")]
    assert "5.6/rules-DeleteSelf" in decision.rules


def test_deletion_rule_on_deployment_status() -> None:
    world = World()
    rules = [{"condition": {"jobDeploymentStatus": "Failed", "ttlSeconds": 5}, "policy": "DeleteCluster"}]
    cluster = finish(world, "FAILED", deletionStrategy={"deletionRules": rules})
    world.advance(5)
    assert deletes(step(world)) == [("RayCluster", cluster)]


def test_deletion_rules_gate_off_is_a_validation_error() -> None:
    from schema.config import FeatureGates

    world = World(config=OperatorConfig(gates=FeatureGates(ray_job_deletion_policy=False)))
    world.add(rayjob(deletionStrategy={"deletionRules": RULES}))
    step(world)
    assert status_of(world)["jobDeploymentStatus"] == "ValidationFailed"
    assert status_of(world)["message"] == "RayJobDeletionPolicy feature gate must be enabled to use DeletionStrategy"


def test_terminal_rayjob_without_end_time_gets_one() -> None:
    world = World()
    world.add(rayjob(status={"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "rayClusterName": "x"}))
    decision = step(world)
    (patch,) = decision.commands
    assert isinstance(patch, PatchStatus) and patch.status == {"endTime": "2024-05-01T12:00:00Z"}


def test_worker_delete_patch_covers_every_group() -> None:
    world = World()
    spec = cluster_spec()
    spec["workerGroupSpecs"].append(dict(spec["workerGroupSpecs"][0], groupName="second"))
    rules = [{"condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 0}, "policy": "DeleteWorkers"}]
    cluster = finish(world, "SUCCEEDED", deletionStrategy={"deletionRules": rules}, rayClusterSpec=spec)
    step(world)
    groups = world.existing("RayCluster", cluster)["spec"]["workerGroupSpecs"]
    assert [g["suspend"] for g in groups] == [True, True]
