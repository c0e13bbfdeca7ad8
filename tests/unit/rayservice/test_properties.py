"""Properties of the RayService reconcile: determinism over whole lifecycles, no polling, and that
random or mutated objects and observations never make it raise."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schema.config import OperatorConfig
from schema.decision import OBS_SERVE, OBS_SERVE_HEALTH, Decision, Snapshot
from schema.keys import ReconcileKey
from services.reconciler.rayservice import reconcile
from services.reconciler.worker.decide import guarded
from tests.unit.rayservice.builders import cluster_config, incremental_strategy, load_sample, rayservice
from tests.unit.rayservice.sim import NOW, World

safe_reconcile = guarded(reconcile)


def _encode(decision: Decision) -> bytes:
    return msgspec.json.encode(decision)


def _lifecycle(world: World, name: str) -> None:
    world.settle(name)
    world.update("RayService", name, lambda o: o["spec"]["rayClusterConfig"].update(rayVersion="2.53.0"), spec=True)
    world.run_timers(name)
    world.update("RayService", name, lambda o: o["spec"].update(suspend=True), spec=True)
    world.settle(name)
    world.update("RayService", name, lambda o: o["spec"].update(suspend=False), spec=True)
    world.settle(name)
    world.delete("RayService", name)
    world.settle(name)


def test_same_snapshot_same_decision_over_a_blue_green_lifecycle() -> None:
    world = World()
    world.add(load_sample("ray-service.sample"))
    _lifecycle(world, "rayservice-sample")
    assert len(world.history) > 20
    for snapshot, now, decision in world.history:
        assert _encode(safe_reconcile(snapshot, now, world.config)) == _encode(decision)
        assert _encode(safe_reconcile(copy.deepcopy(snapshot), now, world.config)) == _encode(decision)


def test_same_snapshot_same_decision_over_an_incremental_lifecycle() -> None:
    world = World()
    world.add(rayservice(upgradeStrategy=incremental_strategy(), rayClusterConfig=cluster_config(autoscaling=True)))
    _lifecycle(world, "rs")
    for snapshot, now, decision in world.history:
        assert _encode(safe_reconcile(snapshot, now, world.config)) == _encode(decision)


def test_wake_ups_are_in_the_future_and_only_for_deadlines() -> None:
    world = World()
    world.add(rayservice(upgradeStrategy=incremental_strategy(), rayClusterConfig=cluster_config(autoscaling=True)))
    _lifecycle(world, "rs")
    for _, now, decision in world.history:
        assert decision.wake_at is None or decision.wake_at > now
    settled = World()
    settled.add(rayservice())
    assert settled.settle("rs").wake_at is None


def _without_versions(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    out = copy.deepcopy(objects)
    for obj in out.values():
        obj["metadata"].pop("resourceVersion", None)
    return out


class RedeliveringWorld(World):
    """Applies every decision twice, checking that the second delivery changes nothing."""

    def apply(self, decision: Decision, key: ReconcileKey | None = None) -> None:
        super().apply(decision, key)
        first = _without_versions(self.objects)
        dashboards = copy.deepcopy(self.dashboards)
        super().apply(decision, key)
        assert _without_versions(self.objects) == first, decision.rules
        assert self.dashboards == dashboards


def test_a_decision_delivered_twice_changes_nothing_the_second_time() -> None:
    world = RedeliveringWorld()
    world.add(rayservice(upgradeStrategy=incremental_strategy(), rayClusterConfig=cluster_config(autoscaling=True)))
    _lifecycle(world, "rs")
    blue_green = RedeliveringWorld()
    blue_green.add(rayservice())
    _lifecycle(blue_green, "rs")
    assert blue_green.get("RayService", "rs") is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)

SPEC_PATHS = [
    ("serveConfigV2",),
    ("rayClusterConfig",),
    ("rayClusterConfig", "headGroupSpec"),
    ("rayClusterConfig", "headGroupSpec", "template"),
    ("rayClusterConfig", "workerGroupSpecs"),
    ("rayClusterConfig", "enableInTreeAutoscaling"),
    ("upgradeStrategy",),
    ("upgradeStrategy", "type"),
    ("upgradeStrategy", "clusterUpgradeOptions"),
    ("upgradeStrategy", "clusterUpgradeOptions", "stepSizePercent"),
    ("rayClusterDeletionDelaySeconds",),
    ("serveService",),
    ("serveService", "spec"),
    ("excludeHeadPodFromServeSvc",),
    ("suspend",),
    ("managedBy",),
]


def _set_path(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node: Any = obj
    for key in path[:-1]:
        if not isinstance(node, dict):
            return
        node = node.setdefault(key, {})
    if isinstance(node, dict):
        node[path[-1]] = value


def _settled_snapshot() -> tuple[Snapshot, OperatorConfig]:
    world = World()
    world.add(rayservice(upgradeStrategy=incremental_strategy(), rayClusterConfig=cluster_config(autoscaling=True)))
    world.settle("rs")
    world.update("RayService", "rs", lambda o: o["spec"]["rayClusterConfig"].update(rayVersion="x"), spec=True)
    world.settle("rs")
    return world.snapshot("rs"), world.config


BASE_SNAPSHOT, BASE_CONFIG = _settled_snapshot()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mutations=st.lists(st.tuples(st.sampled_from(SPEC_PATHS), JSON), min_size=1, max_size=4),
    status=st.one_of(st.none(), JSON),
    serve_obs=JSON,
    health_obs=JSON,
    seconds=st.integers(0, 10**6),
)
def test_mutated_specs_statuses_and_observations_never_raise(
    mutations: list[tuple[tuple[str, ...], Any]], status: Any, serve_obs: Any, health_obs: Any, seconds: int
) -> None:
    entries = {kind: {k: copy.deepcopy(v) for k, v in found.items()} for kind, found in BASE_SNAPSHOT.entries.items()}
    obj = entries["RayService"]["rs"]
    for path, value in mutations:
        _set_path(obj["spec"], path, value)
    if status is not None:
        obj["status"] = status
    for name in list(entries.get(OBS_SERVE, {})):
        entries[OBS_SERVE][name] = serve_obs if isinstance(serve_obs, dict) else {"applications": serve_obs}
    for name in list(entries.get(OBS_SERVE_HEALTH, {})):
        entries[OBS_SERVE_HEALTH][name] = health_obs if isinstance(health_obs, dict) else {"healthy": health_obs}
    snapshot = Snapshot(key=BASE_SNAPSHOT.key, entries=entries)
    now = NOW + timedelta(seconds=seconds)
    decision = safe_reconcile(snapshot, now, BASE_CONFIG)
    assert isinstance(decision, Decision)
    assert _encode(safe_reconcile(snapshot, now, BASE_CONFIG)) == _encode(decision)


@settings(max_examples=150, deadline=None)
@given(obj=st.dictionaries(st.sampled_from(["metadata", "spec", "status", "kind"]), JSON, max_size=4))
def test_arbitrary_objects_never_raise(obj: dict[str, Any]) -> None:
    obj = dict(obj)
    snapshot = Snapshot(
        key=ReconcileKey(kind="RayService", namespace="default", name="rs"), entries={"RayService": {"rs": obj}}
    )
    assert isinstance(safe_reconcile(snapshot, NOW, OperatorConfig()), Decision)


@settings(max_examples=100, deadline=None)
@given(
    metadata=st.fixed_dictionaries(
        {},
        optional={
            "name": st.text(max_size=60),
            "annotations": st.dictionaries(st.sampled_from(["ray.io/initializing-timeout", "x"]), JSON, max_size=2),
            "finalizers": JSON,
            "generation": JSON,
            "deletionTimestamp": JSON,
        },
    )
)
def test_odd_metadata_never_raises(metadata: dict[str, Any]) -> None:
    obj = rayservice()
    obj["metadata"].update(metadata)
    snapshot = Snapshot(
        key=ReconcileKey(kind="RayService", namespace="default", name="rs"), entries={"RayService": {"rs": obj}}
    )
    assert isinstance(safe_reconcile(snapshot, NOW, OperatorConfig()), Decision)
