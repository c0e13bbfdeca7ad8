"""The prober contract over all four kinds: the watcher's probe rows poll exactly what ``schema.probes``
gives each reconcile key, and reconcile's dashboard commands address the dashboard the prober polls."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
import pytest

from schema.config import FeatureGates, OperatorConfig
from schema.decision import OBS_RAY_JOB, OBS_SERVE, OBS_SERVE_HEALTH, Snapshot
from schema.keys import KEY_KINDS, ReconcileKey
from schema.messages import StopRayJob
from schema.probes import ProbeTarget, snapshot_targets
from services.edge.probe.probekinds import PROBE_KINDS
from services.reconciler import raycronjob, rayjob
from tests.unit.apiserver import NAMESPACE, ApiServer
from tests.unit.rayjob.builders import cluster_spec, make_cluster_ready
from tests.unit.rayjob.builders import rayjob as rayjob_object
from tests.unit.rayjob.sim import World as JobWorld
from tests.unit.rayservice.builders import rayservice
from tests.unit.rayservice.sim import World as ServiceWorld

READS = {"RayCluster": set(), "RayJob": {OBS_RAY_JOB}, "RayService": {OBS_SERVE, OBS_SERVE_HEALTH}, "RayCronJob": set()}
"""The observation entry kinds each kind's reconcile reads."""


def _order(targets: Iterable[ProbeTarget]) -> list[bytes]:
    return sorted(msgspec.json.encode(t) for t in targets)


def watcher_targets(world: ApiServer) -> list[ProbeTarget]:
    """What the watcher polls: each probe row over the projected objects of the kinds it says it reads."""
    objects: dict[str, list[dict[str, Any]]] = {}
    for (kind, _), obj in sorted(world.objects.items()):
        objects.setdefault(kind, []).append(obj)
    return [target for row in PROBE_KINDS for target in row.targets({k: objects.get(k, []) for k in row.kinds})]


def snapshot(world: ApiServer, key: ReconcileKey) -> Snapshot:
    """The key's snapshot as the projection holds it (the sims project every object under every key)."""
    entries: dict[str, dict[str, dict[str, Any]]] = {}
    for (kind, name), obj in world.objects.items():
        entries.setdefault(kind, {})[name] = copy.deepcopy(obj)
    return Snapshot(key=key, entries=entries)


def contract_targets(world: ApiServer) -> dict[str, list[ProbeTarget]]:
    """``snapshot_targets`` of every key in the world, by key kind."""
    found: dict[str, list[ProbeTarget]] = {kind: [] for kind in KEY_KINDS}
    for kind in KEY_KINDS:
        for obj in world.of_kind(kind):
            key = ReconcileKey(kind=kind, namespace=NAMESPACE, name=obj["metadata"]["name"])
            targets = snapshot_targets(snapshot(world, key))
            assert all(t.key == key for t in targets)
            found[kind].extend(targets)
    return found


def assert_agree(world: ApiServer) -> list[ProbeTarget]:
    """The watcher polls exactly the union of the keys' targets, each into an entry its kind reads."""
    by_kind = contract_targets(world)
    everything = [t for targets in by_kind.values() for t in targets]
    assert _order(watcher_targets(world)) == _order(everything)
    for kind, targets in by_kind.items():
        assert {t.entry_kind for t in targets} <= READS[kind], kind
    return everything


def running_rayjob(*, name: str = "rj", head_ports: list[dict[str, Any]] | None = None, **spec: Any) -> JobWorld:
    """A RayJob in Running with its (not necessarily ready) cluster, built directly."""
    world = JobWorld()
    body = cluster_spec()
    if head_ports is not None:
        body["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"] = head_ports
    body.update(spec.pop("cluster_fields", {}))
    status = {"jobDeploymentStatus": "Running", "jobId": f"{name}-job", "rayClusterName": f"{name}-cluster"}
    world.add(rayjob_object(name, status=status, rayClusterSpec=body, **spec))
    owner = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": name, "controller": True}]
    world.add(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": f"{name}-cluster", "ownerReferences": owner},
            "spec": copy.deepcopy(body),
        }
    )
    return world


def _rayjob_cluster_unknown() -> ApiServer:
    world = running_rayjob()
    world.remove("RayCluster", "rj-cluster")
    return world


def _rayjob_lifecycle() -> JobWorld:
    world = JobWorld()
    world.add(rayjob_object(submissionMode="HTTPMode"))
    for _ in range(2):
        world.reconcile(rayjob.reconcile, "RayJob", "rj")
    make_cluster_ready(world, world.existing("RayJob", "rj")["status"]["rayClusterName"])
    world.reconcile(rayjob.reconcile, "RayJob", "rj")
    return world


def _rayservice_upgrading() -> ServiceWorld:
    world = ServiceWorld()
    world.add(rayservice())
    world.settle("rs")
    world.auto_ready = False
    world.update("RayService", "rs", lambda o: o["spec"]["rayClusterConfig"].update(rayVersion="2.53.0"), spec=True)
    world.settle("rs")
    world.make_cluster_ready(world.status("rs")["pendingServiceStatus"]["rayClusterName"])
    return world


def _rayservice_suspended() -> ApiServer:
    world = ServiceWorld()
    world.add(rayservice())
    world.settle("rs")
    world.update("RayService", "rs", lambda o: o["spec"].update(suspend=True), spec=True)
    world.settle("rs")
    return world


def _rayservice_token_auth() -> ApiServer:
    world = ServiceWorld()
    world.add(rayservice())
    world.settle("rs")
    for cluster in world.of_kind("RayCluster"):
        cluster["spec"]["authOptions"] = {"mode": "token", "secretName": "my-token"}
    return world


def _raycronjob_child_running() -> ApiServer:
    world = JobWorld(config=OperatorConfig(gates=FeatureGates(ray_cron_job=True)))
    world.add(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCronJob",
            "metadata": {"name": "nightly"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"entrypoint": "x", "rayClusterSpec": cluster_spec()}},
        }
    )
    wake = world.reconcile(raycronjob.reconcile, "RayCronJob", "nightly").wake_at
    assert wake is not None
    world.advance_to(wake)
    world.reconcile(raycronjob.reconcile, "RayCronJob", "nightly")
    [child] = world.of_kind("RayJob")
    cluster = f"{child['metadata']['name']}-cluster"
    world.add({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": cluster}, "spec": cluster_spec()})
    world.set_status(
        "RayJob", child["metadata"]["name"], {"jobDeploymentStatus": "Running", "jobId": "j", "rayClusterName": cluster}
    )
    return world


@pytest.mark.parametrize(
    ("build", "polled"),
    [
        pytest.param(_rayjob_lifecycle, {"RayJob": 1}, id="rayjob-running"),
        pytest.param(lambda: running_rayjob(), {"RayJob": 1}, id="rayjob-no-head-service-yet"),
        pytest.param(_rayjob_cluster_unknown, {}, id="rayjob-cluster-not-projected-yet"),
        pytest.param(_rayservice_upgrading, {"RayService": 4}, id="rayservice-upgrading"),
        pytest.param(_rayservice_suspended, {}, id="rayservice-suspended"),
        pytest.param(_rayservice_token_auth, {"RayService": 2}, id="rayservice-token-auth"),
        pytest.param(_raycronjob_child_running, {"RayJob": 1}, id="raycronjob-child-running"),
    ],
)
def test_the_watcher_polls_what_the_contract_gives_each_key(
    build: Callable[[], ApiServer], polled: dict[str, int]
) -> None:
    world = build()
    targets = assert_agree(world)
    counts = {kind: n for kind in KEY_KINDS if (n := sum(1 for t in targets if t.key.kind == kind))}
    assert counts == polled


def test_a_rayjob_dashboard_port_only_on_the_head_container_is_polled_there() -> None:
    world = running_rayjob(head_ports=[{"name": "dashboard", "containerPort": 8266}])
    [target] = assert_agree(world)
    assert target.dashboard is not None and target.dashboard.port == 8266


def test_a_rayjob_being_deleted_is_not_polled_and_its_stop_uses_the_polled_dashboard() -> None:
    world = running_rayjob(
        head_ports=[{"name": "dashboard", "containerPort": 8266}],
        cluster_fields={"authOptions": {"mode": "token", "secretName": "my-token"}},
    )
    world.add(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "rj-cluster-head-svc", "labels": {"ray.io/cluster": "rj-cluster"}},
            "spec": {"ports": [{"name": "client", "port": 10001}]},
        }
    )
    [target] = assert_agree(world)
    assert target.dashboard is not None and target.dashboard.auth_secret == "my-token"
    assert target.dashboard.port == 8266
    world.delete("RayJob", "rj")
    assert assert_agree(world) == []
    decision = world.reconcile(rayjob.reconcile, "RayJob", "rj")
    [stop] = [c for c in decision.commands if isinstance(c, StopRayJob)]
    assert stop.dashboard == target.dashboard


def test_http_mode_submits_to_the_dashboard_the_prober_polls() -> None:
    world = _rayjob_lifecycle()
    [target] = assert_agree(world)
    world.observations[target.entry_name] = {"http_status": 404}
    world.reconcile(rayjob.reconcile, "RayJob", "rj")
    assert world.submissions and all(s.dashboard == target.dashboard for s in world.submissions)


def test_rayservice_serve_configs_go_to_the_dashboards_the_prober_polls() -> None:
    world = _rayservice_upgrading()
    polled: dict[str, Any] = {}
    for _ in range(10):
        polled.update({t.entry_name: t.dashboard for t in assert_agree(world) if t.entry_kind == OBS_SERVE})
        world.reconcile("rs")
        world.observe("rs")
    assert len({put.dashboard.cluster for put in world.puts}) == 2
    assert all(polled[put.dashboard.cluster] == put.dashboard for put in world.puts)
