"""NewClusterWithIncrementalUpgrade (docs/behaviour.md#6.4): Gateway/HTTPRoute, per-cluster serve Services, traffic
and target_capacity steps every intervalSeconds through wake-ups, promotion, rollback."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise
from typing import Any

from schema.config import FeatureGates, OperatorConfig
from schema.messages import PutServeConfig
from services.reconciler.rayservice import reconcile
from tests.unit.rayservice.builders import cluster_config, incremental_strategy, rayservice
from tests.unit.rayservice.sim import World


def _world(**strategy: Any) -> World:
    world = World()
    world.add(
        rayservice(upgradeStrategy=incremental_strategy(**strategy), rayClusterConfig=cluster_config(autoscaling=True))
    )
    world.settle("rs")
    return world


def _names(world: World) -> tuple[str, str]:
    status = world.status("rs")
    return (
        status.get("activeServiceStatus", {}).get("rayClusterName", ""),
        status.get("pendingServiceStatus", {}).get("rayClusterName", ""),
    )


def _bump(world: World, version: str) -> None:
    world.update("RayService", "rs", lambda o: o["spec"]["rayClusterConfig"].update(rayVersion=version), spec=True)


def _weights(world: World) -> dict[str, int]:
    route = world.get("HTTPRoute", "rs-httproute")
    assert route is not None
    return {ref["name"]: ref["weight"] for ref in route["spec"]["rules"][0]["backendRefs"]}


def test_first_cluster_gets_gateway_route_and_per_cluster_service() -> None:
    world = _world()
    active, pending = _names(world)
    assert active and not pending
    gateway = world.get("Gateway", "rs-gateway")
    assert gateway is not None
    assert gateway["spec"] == {
        "gatewayClassName": "istio",
        "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}],
    }
    assert gateway["metadata"]["ownerReferences"][0]["kind"] == "RayService"
    assert _weights(world) == {f"{active}-serve-svc": 100}
    route = world.get("HTTPRoute", "rs-httproute")
    assert route is not None and route["spec"]["parentRefs"] == [{"name": "rs-gateway", "namespace": "default"}]
    serve = world.get("Service", f"{active}-serve-svc")
    assert serve is not None
    assert serve["metadata"]["ownerReferences"][0]["kind"] == "RayCluster"
    assert serve["spec"]["selector"] == {"ray.io/cluster": active, "ray.io/serve": "true"}
    assert world.get("Service", "rs-serve-svc") is None  # spec.serveService / <rs>-serve-svc are not used
    status = world.status("rs")
    assert status["serviceStatus"] == "Running" and status["numServeEndpoints"] == 2
    assert status["activeServiceStatus"]["targetCapacity"] == 100
    assert status["activeServiceStatus"]["trafficRoutedPercent"] == 100
    # The first submission carries the capacity the pending cluster was given (100: nothing to replace).
    assert world.puts[0].config["target_capacity"] == 100


def test_weights_step_every_interval_then_promotion() -> None:
    world = _world(step=10, interval=30, surge=10)
    old, _ = _names(world)
    start = world.now
    _bump(world, "2.53.0")
    decision = world.settle("rs")
    _, new = _names(world)
    assert new and new != old
    pending_cluster = world.get("RayCluster", new)
    assert pending_cluster is not None
    assert "replicas" not in pending_cluster["spec"]["workerGroupSpecs"][0]  # sized by target_capacity
    assert world.get("Service", f"{new}-serve-svc") is not None
    assert decision.wake_at == start + timedelta(seconds=30)
    world.run_timers("rs")
    steps = [t for t in world.steps("traffic") if t.reason == "IncrementalStep"]
    assert [int(t.attributes["toPercent"]) for t in steps] == list(range(10, 101, 10))
    assert all(t.attributes["from"] == old and t.attributes["to"] == new for t in steps)
    times = [t.at for t in steps]
    assert all(later - earlier == timedelta(seconds=30) for earlier, later in pairwise(times))
    assert _names(world) == (new, "")
    promotion = world.steps("activeCluster")[-1]
    assert (promotion.from_value, promotion.to_value) == (old, new)
    assert world.get("RayCluster", old) is None  # deleted after the default 60 s delay
    assert _weights(world) == {f"{new}-serve-svc": 100}
    capacities = [
        (c.dashboard.cluster, c.config.get("target_capacity")) for c in world.puts if isinstance(c, PutServeConfig)
    ]
    assert (old, 0) in capacities and (new, 100) in capacities
    upgrade = world.condition("rs", "UpgradeInProgress")
    assert upgrade is not None and (upgrade["status"], upgrade["reason"]) == ("False", "NoPendingCluster")
    assert world.status("rs")["serviceStatus"] == "Running"


def test_pending_weight_never_exceeds_its_target_capacity() -> None:
    world = _world(step=20, interval=10, surge=50)
    _bump(world, "2.53.0")
    decision = world.settle("rs")
    seen: list[tuple[int, int]] = []
    for _ in range(100):
        if decision.wake_at is None:
            break
        world.advance_to(decision.wake_at)
        decision = world.settle("rs")
        pending = world.status("rs").get("pendingServiceStatus", {})
        if pending.get("rayClusterName"):
            seen.append((pending.get("trafficRoutedPercent", 0), pending.get("targetCapacity", 0)))
    assert seen and all(traffic <= capacity for traffic, capacity in seen)
    assert _names(world)[1] == ""


def test_no_traffic_moves_before_the_gateway_and_route_are_ready() -> None:
    world = World()
    world.gateway_controller = False
    world.add(rayservice(upgradeStrategy=incremental_strategy(), rayClusterConfig=cluster_config(autoscaling=True)))
    world.settle("rs")
    _bump(world, "2.53.0")
    world.run_timers("rs")
    pending = world.status("rs")["pendingServiceStatus"]
    assert pending.get("targetCapacity", 0) == 0 and pending.get("trafficRoutedPercent", 0) == 0
    world.accept_gateway_objects()
    world.run_timers("rs")
    assert _names(world)[1] == ""


def test_pending_deploy_failed_moves_no_traffic() -> None:
    world = _world()
    _bump(world, "2.53.0")
    world.reconcile("rs")
    _, pending = _names(world)
    world.app_status[pending] = "DEPLOY_FAILED"
    world.run_timers("rs")
    assert _names(world)[1] == pending
    status = world.status("rs")["pendingServiceStatus"]
    assert status.get("trafficRoutedPercent", 0) == 0
    assert all(w == 0 for name, w in _weights(world).items() if name.startswith(pending))


def test_rollback_in_the_middle_moves_traffic_back() -> None:
    world = _world(step=10, interval=30, surge=10)
    old, _ = _names(world)
    _bump(world, "2.53.0")
    decision = world.settle("rs")
    for _ in range(4):
        assert decision.wake_at is not None
        world.advance_to(decision.wake_at)
        decision = world.settle("rs")
    _, new = _names(world)
    moved = world.status("rs")["pendingServiceStatus"]["trafficRoutedPercent"]
    assert 0 < moved < 100
    assert world.status("rs")["numServeEndpoints"] == 4  # both per-cluster Services count mid-upgrade
    _bump(world, "2.52.0")  # back to the active cluster's spec
    world.settle("rs")
    rollback = world.condition("rs", "RollbackInProgress")
    assert rollback is not None and (rollback["status"], rollback["reason"]) == ("True", "DesiredClusterSpecChanged")
    assert [t.to_value for t in world.steps("rollback")] == ["InProgress"]
    world.run_timers("rs")
    assert _names(world) == (old, "")
    assert world.condition("rs", "RollbackInProgress") is None
    assert [t.to_value for t in world.steps("rollback")] == ["InProgress", "Complete"]
    back = [t for t in world.steps("traffic") if t.reason == "RollbackStep"]
    assert back and back[-1].attributes["toPercent"] == "100" and back[-1].attributes["to"] == old
    assert world.get("RayCluster", new) is None
    status = world.status("rs")["activeServiceStatus"]
    assert (status["trafficRoutedPercent"], status["targetCapacity"]) == (100, 100)
    assert len(world.of_kind("RayCluster")) == 1 and not world.steps("activeCluster")[1:]


def test_rollback_cancelled_when_the_spec_returns_to_the_pending_one() -> None:
    world = _world()
    _bump(world, "2.53.0")
    decision = world.settle("rs")
    world.advance_to(decision.wake_at)  # type: ignore[arg-type]
    world.settle("rs")
    _bump(world, "2.52.0")
    world.settle("rs")
    assert world.condition("rs", "RollbackInProgress") is not None
    _bump(world, "2.53.0")
    world.settle("rs")
    assert world.condition("rs", "RollbackInProgress") is None
    assert [t.to_value for t in world.steps("rollback")] == ["InProgress", "Cancelled"]
    _, pending = _names(world)
    world.run_timers("rs")
    assert _names(world) == (pending, "")


def test_third_spec_rolls_back_first_then_upgrades() -> None:
    world = _world()
    old, _ = _names(world)
    _bump(world, "2.53.0")
    decision = world.settle("rs")
    world.advance_to(decision.wake_at)  # type: ignore[arg-type]
    world.settle("rs")
    _, second = _names(world)
    _bump(world, "2.54.0")
    world.settle("rs")
    assert world.condition("rs", "RollbackInProgress") is not None
    world.run_timers("rs")
    active, pending = _names(world)
    assert pending == "" and active not in (old, second)
    assert [t.to_value for t in world.steps("rollback")] == ["InProgress", "Complete"]
    assert world.existing("RayCluster", active)["spec"]["rayVersion"] == "2.54.0"


def test_gate_off_means_no_incremental_upgrade() -> None:
    config = OperatorConfig(gates=FeatureGates(ray_service_incremental_upgrade=False))
    world = World(config=config)
    world.add(rayservice(upgradeStrategy=incremental_strategy(), rayClusterConfig=cluster_config(autoscaling=True)))
    world.settle("rs")
    assert world.get("Gateway", "rs-gateway") is None
    assert world.get("Service", "rs-serve-svc") is not None
    active, _ = _names(world)
    _bump(world, "2.53.0")
    world.settle("rs")
    assert _names(world)[0] == active  # with the gate off the type is not NewCluster: no zero-downtime upgrade


def test_traffic_wake_up_is_the_next_interval_boundary() -> None:
    world = _world(step=10, interval=45, surge=10)
    _bump(world, "2.53.0")
    decision = world.settle("rs")
    assert decision.wake_at == world.now + timedelta(seconds=45)
    # Before the boundary nothing moves, whatever wakes the key.
    world.advance(44)
    again = reconcile(world.snapshot("rs"), world.now, world.config)
    assert again.wake_at == decision.wake_at
    assert not any(isinstance(c, PutServeConfig) for c in again.commands)
