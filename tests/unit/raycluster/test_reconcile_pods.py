"""docs/behaviour.md#4.2 behaviours: suspend, group suspend, Recreate, workersToDelete, autoscaler scale-down rules,
unhealthy pods, disable-provisioned-head-restart, multi-host groups."""

from __future__ import annotations

from typing import Any

import pytest

from schema.config import FeatureGates
from schema.decision import Decision
from schema.messages import CreateObject, DeleteCollection, DeleteObject, PatchObject
from tests.unit.raycluster import builders
from tests.unit.raycluster.sim import World


def pod_creates(decision: Decision) -> list[dict[str, Any]]:
    return [c.body for c in decision.commands if isinstance(c, CreateObject) and c.target.kind == "Pod"]


def deletes(decision: Decision) -> list[str]:
    return [c.target.name for c in decision.commands if isinstance(c, DeleteObject)]


def workers(world: World, group: str = "workers") -> list[dict[str, Any]]:
    return [p for p in world.pods() if p["metadata"]["labels"].get("ray.io/group") == group]


def conditions(world: World) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in world.cluster.get("status", {}).get("conditions", [])}


# -- suspend (§4.4) ---------------------------------------------------------------------------------------
def test_suspend_is_atomic_and_resumes() -> None:
    world = World(builders.cluster())
    world.converge()
    world.update_spec(lambda s: s.update(suspend=True))
    first = world.step()  # status step sets Suspending; pods untouched this pass
    assert "4.4/suspend-requested" in first.rules
    assert conditions(world)["RayClusterSuspending"]["status"] == "True"
    assert len(world.pods()) == 3
    # Suspending is atomic: even if suspend goes back to false, deletion finishes.
    world.update_spec(lambda s: s.update(suspend=False))
    second = world.step()
    collections = [c for c in second.commands if isinstance(c, DeleteCollection)]
    assert [c.label_selector for c in collections] == ["ray.io/cluster=rc"]
    assert any(e.reason == "DeletedPod" for e in world.events)
    world.settle()
    world.update_spec(lambda s: s.update(suspend=True))
    world.step()
    cond = conditions(world)
    assert cond["RayClusterSuspended"]["status"] == "True"
    assert cond["RayClusterSuspending"]["status"] == "False"
    assert cond["RayClusterProvisioned"]["status"] == "False"
    assert cond["RayClusterProvisioned"]["message"] == "RayCluster has been suspended"
    assert world.cluster["status"]["state"] == "suspended"
    suspended = world.step()
    assert "4.2/suspended" in suspended.rules and not pod_creates(suspended)
    # resume
    world.update_spec(lambda s: s.update(suspend=False))
    world.step()
    assert conditions(world)["RayClusterSuspended"]["status"] == "False"
    world.converge()
    assert len(world.pods()) == 3
    assert world.cluster["status"]["state"] == "ready"
    states = [(t.from_value, t.to_value) for d in world.decisions for t in d.transitions() if t.field == "state"]
    assert states == [("", "ready"), ("ready", "suspended"), ("suspended", "ready")]


def test_suspend_without_status_conditions_gate_deletes_directly() -> None:
    world = World(builders.cluster(), config=builders.config(gates=FeatureGates(ray_cluster_status_conditions=False)))
    world.converge()
    world.update_spec(lambda s: s.update(suspend=True))
    decision = world.step()
    assert any(isinstance(c, DeleteCollection) for c in decision.commands)
    world.settle()
    world.converge()
    assert world.cluster["status"]["state"] == "suspended"
    assert "conditions" not in world.cluster["status"]


def test_both_suspend_conditions_true_is_invalid_status() -> None:
    world = World(builders.cluster())
    world.converge()
    world.cluster["status"]["conditions"] += [
        {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}
        for t in ("RayClusterSuspending", "RayClusterSuspended")
    ]
    world.cluster["status"]["conditions"] = [
        c
        for c in world.cluster["status"]["conditions"]
        if c["type"] not in ("RayClusterSuspending", "RayClusterSuspended") or c["status"] == "True"
    ]
    decision = world.step()
    assert [e.reason for e in world.events[-1:]] == ["InvalidRayClusterStatus"]
    assert decision.wake_at is not None and (decision.wake_at - world.now).total_seconds() == 2


def test_group_suspend_deletes_only_that_group() -> None:
    world = World(builders.cluster(groups=[builders.group("a"), builders.group("b")]))
    world.converge()
    world.update_spec(lambda s: s["workerGroupSpecs"][0].update(suspend=True))
    decision = world.step()
    selectors = [c.label_selector for c in decision.commands if isinstance(c, DeleteCollection)]
    assert selectors == ["ray.io/cluster=rc,ray.io/group=a"]
    world.settle()
    world.converge()
    assert not workers(world, "a") and len(workers(world, "b")) == 2
    assert world.cluster["status"]["desiredWorkerReplicas"] == 2


# -- Recreate ----------------------------------------------------------------------------------------------
def test_recreate_upgrade_replaces_all_pods() -> None:
    world = World(builders.cluster(upgradeStrategy={"type": "Recreate"}))
    world.converge()
    before = {p["metadata"]["uid"] for p in world.pods()}
    world.update_spec(lambda s: s["headGroupSpec"]["template"]["spec"]["containers"][0].update(image="ray:new"))
    decision = world.step()
    assert "4.2/recreate-delete-all-pods" in decision.rules
    world.settle()
    world.converge()
    after = {p["metadata"]["uid"] for p in world.pods()}
    assert len(after) == 3 and not before & after
    head = next(p for p in world.pods() if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    assert head["spec"]["containers"][0]["image"] == "ray:new"


def test_recreate_ignores_replica_changes() -> None:
    world = World(builders.cluster(upgradeStrategy={"type": "Recreate"}))
    world.converge()
    world.update_spec(lambda s: s["workerGroupSpecs"][0].update(replicas=3, scaleStrategy={"workersToDelete": []}))
    decision = world.step()
    assert "4.2/recreate-delete-all-pods" not in decision.rules
    assert len(pod_creates(decision)) == 1


def test_recreate_after_operator_upgrade_only_rewrites_annotations() -> None:
    world = World(builders.cluster(upgradeStrategy={"type": "Recreate"}))
    world.converge()
    head = next(p for p in world.pods() if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    head["metadata"]["annotations"]["ray.io/kuberay-version"] = "v1.6.0"
    head["metadata"]["annotations"]["ray.io/upgrade-strategy-recreate-hash"] = "OLD"
    decision = world.step()
    patches = [c for c in decision.commands if isinstance(c, PatchObject)]
    assert len(patches) == 1 and patches[0].target.name == head["metadata"]["name"]
    assert not any(isinstance(c, DeleteCollection) for c in decision.commands)
    assert world.step().commands == ()


def test_upgrade_strategy_not_allowed_on_rayjob_clusters() -> None:
    obj = builders.cluster(upgradeStrategy={"type": "Recreate"}, labels={"ray.io/originated-from-crd": "RayJob"})
    decision = World(obj).step()
    assert decision.rules == ("4.1/upgrade-strategy-invalid",)
    assert [c.reason for c in decision.commands] == ["InvalidRayClusterSpec"]  # type: ignore[union-attr]


# -- workersToDelete, autoscaler -------------------------------------------------------------------------
def test_workers_to_delete_always_applies() -> None:
    world = World(builders.cluster(groups=[builders.group(replicas=3)]))
    world.converge()
    victim = sorted(p["metadata"]["name"] for p in workers(world))[1]
    world.update_spec(lambda s: s["workerGroupSpecs"][0].update(scaleStrategy={"workersToDelete": [victim]}))
    decision = world.step()
    assert deletes(decision) == [victim]
    assert len(pod_creates(decision)) == 1  # replicas still 3: replaced in the same pass
    again = world.step()  # list not cleared by the operator, victim terminating: nothing new
    assert deletes(again) == [] and pod_creates(again) == []


def test_autoscaler_owns_scale_down() -> None:
    world = World(builders.cluster(groups=[builders.group(replicas=3)], enableInTreeAutoscaling=True))
    world.converge()
    world.update_spec(lambda s: s["workerGroupSpecs"][0].update(replicas=1))
    decision = world.step()
    assert deletes(decision) == []
    assert "4.2/autoscaler-owns-scale-down:workers" in decision.rules
    # ...and scales down through workersToDelete
    victims = sorted(p["metadata"]["name"] for p in workers(world))[:2]
    world.update_spec(lambda s: s["workerGroupSpecs"][0].update(scaleStrategy={"workersToDelete": victims}))
    assert sorted(deletes(world.step())) == victims


def test_random_pod_delete_lets_operator_scale_down() -> None:
    world = World(
        builders.cluster(groups=[builders.group(replicas=3)], enableInTreeAutoscaling=True),
        config=builders.config(enable_random_pod_delete=True),
    )
    world.converge()
    world.update_spec(lambda s: s["workerGroupSpecs"][0].update(replicas=1))
    assert len(deletes(world.step())) == 2


def test_autoscaler_creates_rbac_once() -> None:
    world = World(builders.cluster(enableInTreeAutoscaling=True))
    decision = world.step()
    kinds = [c.target.kind for c in decision.commands if isinstance(c, CreateObject)]
    assert kinds[:3] == ["ServiceAccount", "Role", "RoleBinding"]
    assert [e.reason for e in world.events[:3]] == ["CreatedServiceAccount", "CreatedRole", "CreatedRoleBinding"]
    kinds = [c.target.kind for c in world.step().commands if isinstance(c, CreateObject)]
    assert "ServiceAccount" not in kinds


def test_user_named_service_account_is_not_created() -> None:
    obj = builders.cluster(enableInTreeAutoscaling=True)
    obj["spec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"] = "mine"
    decision = World(obj).step()
    kinds = [c.target.kind for c in decision.commands if isinstance(c, CreateObject)]
    assert "ServiceAccount" not in kinds and "RoleBinding" in kinds
    head = next(b for b in pod_creates(decision) if b["metadata"]["labels"]["ray.io/node-type"] == "head")
    assert head["spec"]["serviceAccountName"] == "mine"


# -- unhealthy pods ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("phase", "restart", "terminated", "deleted"),
    [
        pytest.param("Failed", "Always", False, True, id="failed"),
        pytest.param("Succeeded", "Always", False, True, id="succeeded"),
        pytest.param("Running", "Never", True, True, id="running-terminated-never"),
        pytest.param("Running", "Always", True, False, id="running-terminated-always"),
        pytest.param("Running", "Never", False, False, id="running-healthy"),
        pytest.param("Pending", "Never", False, False, id="pending"),
    ],
)
def test_unhealthy_worker_deleted_first(phase: str, restart: str, terminated: bool, deleted: bool) -> None:
    world = World(builders.cluster(groups=[builders.group(replicas=2)]))
    world.converge()
    name = workers(world)[0]["metadata"]["name"]
    pod = world.objects[("Pod", name)]
    pod["spec"]["restartPolicy"] = restart
    state = {"terminated": {"exitCode": 1}} if terminated else {"running": {}}
    world.set_pod(name, phase=phase, ready=False, extra={"containerStatuses": [{"name": "ray-worker", "state": state}]})
    decision = world.step()
    if deleted:
        assert deletes(decision) == [name]
        assert pod_creates(decision) == []  # an error ends the pass: no creation until it is gone
        assert decision.wake_at is not None and (decision.wake_at - world.now).total_seconds() == 2
        assert any(e.reason == "DeletedWorkerPod" for e in world.events)
        waiting = world.step()  # terminating: the group waits, nothing re-deleted
        assert deletes(waiting) == [] and pod_creates(waiting) == []
        world.settle()
        assert len(pod_creates(world.step())) == 1
    else:
        assert deletes(decision) == []


def test_failed_head_is_deleted_and_recreated() -> None:
    world = World(builders.cluster())
    world.converge()
    head = next(p for p in world.pods() if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    name = head["metadata"]["name"]
    world.set_pod(name, phase="Failed", ready=False)
    decision = world.step()
    assert deletes(decision) == [name] and "4.2/delete-head-pod" in decision.rules
    assert any(e.reason == "DeletedHeadPod" for e in world.events)
    world.settle()
    decision = world.step()
    assert [b["metadata"]["name"] for b in pod_creates(decision)] == [name]


def test_disable_provisioned_head_restart() -> None:
    world = World(builders.cluster(annotations={"ray.io/disable-provisioned-head-restart": "true"}))
    world.converge()
    head = next(p for p in world.pods() if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    del world.objects[("Pod", head["metadata"]["name"])]
    worker = workers(world)[0]["metadata"]["name"]
    del world.objects[("Pod", worker)]
    decision = world.step()
    assert "4.2/head-restart-disabled" in decision.rules
    assert pod_creates(decision) == []  # workers are not reconciled either


# -- multi-host (§4.2 step 6) ----------------------------------------------------------------------------
def multihost(replicas: int = 2, hosts: int = 2, **extra: Any) -> dict[str, Any]:
    return builders.cluster(groups=[builders.group("tpu", replicas=replicas, num_of_hosts=hosts, **extra)])


def test_multihost_creates_atomic_replicas_with_labels() -> None:
    world = World(multihost())
    decision = world.step()
    pods = [b for b in pod_creates(decision) if b["metadata"]["labels"]["ray.io/node-type"] == "worker"]
    assert len(pods) == 4
    labels = [b["metadata"]["labels"] for b in pods]
    replicas = {lab["ray.io/worker-group-replica-name"] for lab in labels}
    assert len(replicas) == 2 and all(r.startswith("tpu-") and len(r) == 9 for r in replicas)
    by_replica = {
        r: sorted(lab["ray.io/replica-host-index"] for lab in labels if lab["ray.io/worker-group-replica-name"] == r)
        for r in replicas
    }
    assert all(v == ["0", "1"] for v in by_replica.values())
    assert sorted({lab["ray.io/worker-group-replica-index"] for lab in labels}) == ["0", "1"]
    assert "rc-headless" in [c.target.name for c in decision.commands if isinstance(c, CreateObject)]
    world.settle()
    world.converge()
    assert world.cluster["status"]["desiredWorkerReplicas"] == 4


def test_multihost_unhealthy_pod_deletes_its_whole_replica() -> None:
    world = World(multihost())
    world.converge()
    pod = workers(world, "tpu")[0]
    replica = pod["metadata"]["labels"]["ray.io/worker-group-replica-name"]
    world.set_pod(pod["metadata"]["name"], phase="Failed", ready=False)
    decision = world.step()
    same = sorted(
        p["metadata"]["name"]
        for p in workers(world, "tpu")
        if p["metadata"]["labels"]["ray.io/worker-group-replica-name"] == replica
    )
    assert sorted(deletes(decision)) == same
    world.settle()
    world.converge()
    assert len(workers(world, "tpu")) == 4


def test_multihost_workers_to_delete_and_scale_down() -> None:
    world = World(multihost(replicas=3))
    world.converge()
    victim = workers(world, "tpu")[0]["metadata"]["name"]
    world.update_spec(
        lambda s: s["workerGroupSpecs"][0].update(replicas=2, scaleStrategy={"workersToDelete": [victim]})
    )
    decision = world.step()
    assert len(deletes(decision)) == 2 and victim in deletes(decision)
    world.settle()
    world.update_spec(lambda s: s["workerGroupSpecs"][0].update(scaleStrategy={}))
    world.converge()
    assert len(workers(world, "tpu")) == 4
    world.update_spec(lambda s: s["workerGroupSpecs"][0].update(replicas=1))
    assert len(deletes(world.step())) == 2


def test_multihost_incomplete_old_replica_is_deleted_young_one_completed() -> None:
    world = World(multihost(replicas=1))
    first = world.step()
    created = [b["metadata"]["name"] for b in pod_creates(first) if "worker" in b["metadata"]["name"]]
    # a stale view: only one host of the new replica is visible → it is completed, not deleted
    del world.objects[("Pod", created[1])]
    decision = world.step()
    assert [b["metadata"]["name"] for b in pod_creates(decision)] == [created[1]]
    assert deletes(decision) == []
    # an old incomplete replica (a host vanished long ago) is deleted whole
    world.settle()
    world.converge()
    del world.objects[("Pod", created[1])]
    world.advance(120)
    decision = world.step()
    assert deletes(decision) == [created[0]]
