"""docs/behaviour.md#4.1 prelude checks (steps 6-9), head pod edge cases, and the reconcile safety net."""

from __future__ import annotations

from datetime import datetime, timedelta

from schema.config import FeatureGates, OperatorConfig
from schema.decision import Decision, Snapshot
from schema.messages import CreateObject, EmitEvent
from services.reconciler import raycluster
from services.reconciler.worker.decide import guarded
from tests.unit.raycluster import builders
from tests.unit.raycluster.sim import NOW, World


def test_autoscaler_v1_worker_restart_policy_is_only_a_warning() -> None:
    obj = builders.cluster(enableInTreeAutoscaling=True)
    obj["spec"]["workerGroupSpecs"][0]["template"]["spec"]["restartPolicy"] = "Always"
    world = World(obj)
    decision = world.step()
    assert "4.1/autoscaler-v1-restart-policy" in decision.rules
    assert "4.2/create-head-pod" in decision.rules  # the pass goes on
    warning = world.events[0]
    assert (warning.event_type, warning.reason) == ("Warning", "InvalidRayClusterSpec")
    assert "restartPolicy Always" in warning.message


def test_mtls_is_not_supported() -> None:
    obj = builders.cluster(tlsOptions={"enabled": True})
    decision = World(obj, config=builders.config(gates=FeatureGates(ray_cluster_mtls=True))).step()
    assert decision.rules == ("4.1/mtls-unsupported",)
    assert not [c for c in decision.commands if isinstance(c, CreateObject)]


def test_several_head_pods_are_an_error() -> None:
    world = World(builders.cluster())
    world.converge()
    head = next(p for p in world.pods() if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    twin = {**head, "metadata": {**head["metadata"], "name": "rc-head-extra", "uid": "other"}}
    world.objects[("Pod", "rc-head-extra")] = twin
    decision = world.step()
    assert "4.2/multiple-head-pods" in decision.rules
    assert "4.5/status-not-computed" in decision.rules
    assert decision.wake_at == world.now + timedelta(seconds=2)


def test_terminating_head_lets_workers_reconcile() -> None:
    world = World(builders.cluster())
    world.converge()
    head = next(p for p in world.pods() if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    head["metadata"]["deletionTimestamp"] = "2025-03-01T12:00:00Z"
    worker = next(p for p in world.pods() if p["metadata"]["labels"]["ray.io/node-type"] == "worker")
    del world.objects[("Pod", worker["metadata"]["name"])]
    decision = world.step()
    assert "4.3/head-pod-terminating" in decision.rules
    assert "4.2/scale-up:workers+1" in decision.rules


def test_unexpected_failure_becomes_a_warning() -> None:
    def boom(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
        raise TypeError("unexpected shape")

    world = World(builders.cluster())
    decision = guarded(boom)(world.snapshot(), NOW, world.config)
    assert decision.rules == ("4.1/malformed",)
    (event,) = decision.commands
    assert isinstance(event, EmitEvent)
    assert event.reason == "InvalidRayClusterSpec" and "TypeError: unexpected shape" in event.message


def test_naive_now_is_taken_as_utc() -> None:
    world = World(builders.cluster())
    aware = raycluster.reconcile(world.snapshot(), NOW, world.config)
    naive = raycluster.reconcile(world.snapshot(), NOW.replace(tzinfo=None), world.config)
    assert aware == naive
