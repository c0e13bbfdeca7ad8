"""The core RayCluster loop: create head/service/workers, scale, status, transitions, idempotency."""

from __future__ import annotations

from datetime import timedelta

import pytest

from schema.messages import CreateObject, DeleteObject, PatchStatus
from services.reconciler.raycluster import reconcile
from tests.unit.raycluster import builders
from tests.unit.raycluster.sim import NOW, World


def creates(decision, kind: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [c.target.name for c in decision.commands if isinstance(c, CreateObject) and c.target.kind == kind]


def deletes(decision) -> list[str]:  # type: ignore[no-untyped-def]
    return [c.target.name for c in decision.commands if isinstance(c, DeleteObject)]


def test_first_pass_creates_service_head_and_workers() -> None:
    world = World(builders.cluster())
    decision = world.step()
    assert creates(decision, "Service") == ["rc-head-svc"]
    heads = creates(decision, "Pod")
    assert heads[0].startswith("rc-head-") and len(heads[0]) == len("rc-head-") + 5
    assert [n.rsplit("-", 1)[0] for n in heads[1:]] == ["rc-workers-worker", "rc-workers-worker"]
    assert "4.2/create-head-pod" in decision.rules
    assert "4.2/scale-up:workers+2" in decision.rules
    # no head Service yet in the snapshot → status not computed this pass, wake in 2 s
    assert not [c for c in decision.commands if isinstance(c, PatchStatus)]
    assert decision.wake_at == NOW + timedelta(seconds=2)
    reasons = [e.reason for e in world.events]
    assert reasons == ["CreatedService", "CreatedHeadPod", "CreatedWorkerPod", "CreatedWorkerPod"]


def test_every_pod_has_owner_reference_and_labels() -> None:
    world = World(builders.cluster())
    world.step()
    for pod in world.pods():
        ref = pod["metadata"]["ownerReferences"][0]
        assert ref == {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "name": "rc",
            "uid": builders.UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert pod["metadata"]["labels"]["ray.io/cluster"] == "rc"


def test_converges_to_ready_with_transition() -> None:
    world = World(builders.cluster())
    steps = world.converge()
    assert steps <= 5
    status = world.cluster["status"]
    assert status["state"] == "ready"
    assert status["readyWorkerReplicas"] == 2
    assert status["availableWorkerReplicas"] == 2
    assert status["desiredWorkerReplicas"] == 2
    assert status["observedGeneration"] == 1
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["HeadPodReady"]["status"] == "True"
    assert conditions["HeadPodReady"]["reason"] == "HeadPodRunningAndReady"
    assert conditions["RayClusterProvisioned"]["reason"] == "AllPodRunningAndReadyFirstTime"
    assert status["stateTransitionTimes"] == {"ready": "2025-03-01T12:00:00Z"}
    transitions = [t for d in world.decisions for t in d.transitions()]
    state = [t for t in transitions if t.field == "state"]
    assert [(t.from_value, t.to_value) for t in state] == [("", "ready")]
    assert state[0].resource_version and state[0].uid == builders.UID
    fields = {t.field for t in transitions}
    assert {"condition/HeadPodReady", "condition/RayClusterProvisioned"} <= fields
    # converged: the no-op pass wakes after the default requeue
    final = world.decisions[-1]
    assert final.commands == ()
    assert final.wake_at == world.now + timedelta(seconds=300)


def test_scale_up_and_down() -> None:
    world = World(builders.cluster())
    world.converge()
    world.update_spec(lambda s: s["workerGroupSpecs"][0].update(replicas=4))
    decision = world.step()
    assert len(creates(decision, "Pod")) == 2
    assert "4.2/scale-up:workers+2" in decision.rules
    world.settle()
    world.converge()
    assert len([p for p in world.pods() if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]) == 4
    world.update_spec(lambda s: s["workerGroupSpecs"][0].update(replicas=1))
    decision = world.step()
    assert len(deletes(decision)) == 3
    assert "4.2/scale-down:workers-3" in decision.rules
    world.settle()
    world.converge()
    assert world.cluster["status"]["desiredWorkerReplicas"] == 1
    assert len(world.pods()) == 2


@pytest.mark.parametrize(
    ("replicas", "lo", "hi", "expected"),
    [
        pytest.param(5, 0, 3, 3, id="clamped-to-max"),
        pytest.param(0, 2, 5, 2, id="raised-to-min"),
        pytest.param(3, 1, 5, 3, id="within-bounds"),
    ],
)
def test_replicas_are_clamped(replicas: int, lo: int, hi: int, expected: int) -> None:
    world = World(builders.cluster(groups=[builders.group(replicas=replicas, min_replicas=lo, max_replicas=hi)]))
    decision = world.step()
    assert len(creates(decision, "Pod")) == 1 + expected


def test_stale_snapshot_reissues_the_same_names() -> None:
    world = World(builders.cluster(groups=[builders.group(replicas=3)]))
    snapshot = world.snapshot()
    first = reconcile(snapshot, NOW, world.config)
    world.apply(first)
    # The previous decision's pods are not visible yet: the same decision comes back.
    again = reconcile(snapshot, NOW, world.config)
    assert creates(again, "Pod") == creates(first, "Pod")
    world.apply(again)
    assert len(world.pods()) == 4  # AlreadyExists absorbed the repeat
    # Only some of them visible: the missing ones are re-issued under the same names, nothing extra.
    partial = world.snapshot()
    hidden = creates(first, "Pod")[2]
    entries = {k: dict(v) for k, v in partial.entries.items()}
    del entries["Pod"][hidden]
    stale = type(partial)(key=partial.key, entries=entries, revision=partial.revision)
    decision = reconcile(stale, NOW, world.config)
    assert creates(decision, "Pod") == [hidden]
    assert deletes(decision) == []


def test_repeated_scale_down_is_a_no_op() -> None:
    world = World(builders.cluster(groups=[builders.group(replicas=3)]))
    world.converge()
    world.update_spec(lambda s: s["workerGroupSpecs"][0].update(replicas=1))
    first = world.step()
    victims = deletes(first)
    assert len(victims) == 2
    # The victims are terminating but still listed: no new victims are picked.
    again = world.step()
    assert deletes(again) == []
    world.settle()
    assert sorted(p["metadata"]["name"] for p in world.pods() if p["metadata"]["name"] in victims) == []


def test_cluster_gone_gives_empty_decision() -> None:
    world = World(builders.cluster())
    del world.objects[("RayCluster", "rc")]
    decision = world.step()
    assert decision.commands == () and decision.wake_at is None


def test_managed_by_other_controller_is_skipped() -> None:
    world = World(builders.cluster(managedBy="kueue.x-k8s.io/multikueue"))
    decision = world.step()
    assert decision.commands == ()
    assert decision.rules == ("4.1/managed-by-other",)


def test_status_write_only_when_changed() -> None:
    world = World(builders.cluster())
    world.converge()
    world.advance(30)
    decision = world.step()
    assert decision.commands == ()  # lastUpdateTime alone never triggers a write
    world.update_spec(lambda s: None)  # generation bump only
    decision = world.step()
    assert decision.commands == ()


def test_status_patch_carries_resource_version_and_nulls() -> None:
    world = World(builders.cluster())
    world.converge()
    world.update_spec(lambda s: s["workerGroupSpecs"][0].update(replicas=0))
    world.step()
    world.settle()
    decision = world.step(apply=False)
    patch = next(c for c in decision.commands if isinstance(c, PatchStatus))
    assert patch.resource_version == world.cluster["metadata"]["resourceVersion"]
    assert patch.status["readyWorkerReplicas"] is None  # 0 is the default: the merge patch deletes the key
    world.apply(decision)
    status = world.cluster["status"]
    assert "readyWorkerReplicas" not in status
    assert "desiredWorkerReplicas" not in status


def test_reconcile_is_deterministic_and_leaves_ids_to_decide() -> None:
    world = World(builders.cluster(groups=[builders.group(replicas=5)]))
    snapshot = world.snapshot()
    one = reconcile(snapshot, NOW, world.config)
    two = reconcile(snapshot, NOW, world.config)
    assert one == two
    assert one.commands and {c.id for c in one.commands} == {""}  # ids are decide's, one rule for every kind
