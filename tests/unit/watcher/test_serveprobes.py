"""The watcher's RayService probe rows agree with the reconcile's prober contract
(``services.reconciler.rayservice.probes``), and their observation data and significance rules."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from schema.keys import ReconcileKey
from services.reconciler.rayservice import probe_targets
from services.watcher.dashboard import DashboardAnswer, PodEndpoint, pod_base_url
from services.watcher.prober import ProbeTarget
from services.watcher.serveprobes import (
    SERVE_PROBES,
    health_data,
    health_significant,
    health_targets,
    serve_significant,
    serve_targets,
)
from tests.unit.rayservice.builders import cluster_config, rayservice
from tests.unit.rayservice.sim import World


def objects_of(world: World) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (kind, _), obj in sorted(world.objects.items()):
        found[kind].append(obj)
    return dict(found)


def contract(world: World, name: str = "rs") -> tuple[list[Any], list[Any]]:
    serve, health = probe_targets(world.snapshot(name))
    return (
        sorted((p.cluster, p.dashboard, p.path, p.entry_kind) for p in serve),
        sorted((p.pod, p.pod_uid, p.pod_ip, p.port, p.path, p.entry_kind) for p in health),
    )


def watcher_side(world: World) -> tuple[list[Any], list[Any]]:
    objects = objects_of(world)
    serve = serve_targets(objects)
    health = health_targets(objects)
    assert all(t.source == "serve" for t in serve) and all(t.source == "servehealth" for t in health)
    assert all(t.pod is not None for t in health)
    return (
        sorted((t.entry_name, t.dashboard, t.path, t.entry_kind) for t in serve),
        sorted(
            (t.entry_name, t.pod.uid, t.pod.ip, t.pod.port, t.path, t.entry_kind) for t in health if t.pod is not None
        ),
    )


def _upgrading(world: World) -> None:
    world.auto_ready = False
    world.update("RayService", "rs", lambda o: o["spec"]["rayClusterConfig"].update(rayVersion="2.53.0"), spec=True)
    world.settle("rs")


def _suspended(world: World) -> None:
    world.update("RayService", "rs", lambda o: o["spec"].update(suspend=True), spec=True)
    world.settle("rs")


def _excluded(world: World) -> None:
    world.update("RayService", "rs", lambda o: o["spec"].update(excludeHeadPodFromServeSvc=True), spec=True)


def _deleting(world: World) -> None:
    world.update("RayService", "rs", lambda o: o["metadata"].update(deletionTimestamp="2024-05-01T12:00:00Z"))


def _token_auth(world: World) -> None:
    for cluster in world.of_kind("RayCluster"):
        cluster["spec"]["authOptions"] = {"mode": "token"}


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(None, id="settled"),
        pytest.param(_upgrading, id="pending-cluster-not-ready"),
        pytest.param(_suspended, id="suspended"),
        pytest.param(_excluded, id="head-excluded"),
        pytest.param(_deleting, id="being-deleted"),
        pytest.param(_token_auth, id="token-auth"),
    ],
)
def test_targets_match_the_reconcile_contract(change: Any) -> None:
    world = World()
    world.add(rayservice(rayClusterConfig=cluster_config()))
    world.settle("rs")
    if change is not None:
        change(world)
    assert watcher_side(world) == contract(world)


def test_both_clusters_are_probed_during_an_upgrade() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    world.auto_ready = False
    world.update("RayService", "rs", lambda o: o["spec"]["rayClusterConfig"].update(rayVersion="2.53.0"), spec=True)
    world.settle("rs")
    pending = world.status("rs")["pendingServiceStatus"]["rayClusterName"]
    world.make_cluster_ready(pending)
    serve, health = watcher_side(world)
    assert len(serve) == 2 and len(health) == 2
    assert (serve, health) == contract(world)


def test_timed_out_rayservice_is_not_probed() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    world.update(
        "RayService",
        "rs",
        lambda o: o["status"]["conditions"].append(
            {"type": "Ready", "status": "False", "reason": "InitializingTimeout"}
        ),
    )
    assert watcher_side(world) == ([], []) == contract(world)


def _target() -> ProbeTarget:
    pod = PodEndpoint(namespace="ns", name="rs-abcde-head", uid="u1", ip="10.0.0.1", port=8000)
    return ProbeTarget(
        key=ReconcileKey(kind="RayService", namespace="ns", name="rs"),
        source="servehealth",
        entry_kind="obs-servehealth",
        entry_name=pod.name,
        path="/-/healthz",
        pod=pod,
    )


def test_probe_kinds_read_what_their_rules_need() -> None:
    assert {k.name: set(k.kinds) for k in SERVE_PROBES} == {
        "serve": {"RayService", "RayCluster", "Service"},
        "servehealth": {"RayService", "RayCluster", "Pod"},
    }


@pytest.mark.parametrize(
    ("answer", "healthy"),
    [
        pytest.param(DashboardAnswer(status=200, data=b"success"), True, id="success"),
        pytest.param(DashboardAnswer(status=200, data=b"starting"), False, id="other-body"),
        pytest.param(DashboardAnswer(status=503, data=b"This node is being drained."), False, id="draining"),
        pytest.param(DashboardAnswer(status=0, error="ClientConnectorError"), False, id="unreachable"),
    ],
)
def test_health_data(answer: DashboardAnswer, healthy: bool) -> None:
    data = health_data(_target(), answer)
    assert data == {"healthy": healthy, "http_status": answer.status, "pod_uid": "u1"}
    assert health_significant(data) == (healthy, "u1")


def test_health_significance_ignores_the_failure_kind_but_not_the_pod() -> None:
    down = health_significant({"healthy": False, "http_status": 503, "pod_uid": "u1"})
    assert down == health_significant({"healthy": False, "http_status": 0, "pod_uid": "u1"})
    assert down != health_significant({"healthy": False, "http_status": 0, "pod_uid": "u2"})


def _apps(status: str, deployment: str = "HEALTHY", message: str = "") -> dict[str, Any]:
    return {
        "controller_info": {"node_id": "n"},
        "applications": {
            "app": {
                "status": status,
                "message": message,
                "last_deployed_time_s": 1.0,
                "deployments": {"D": {"status": deployment, "message": "", "replicas": []}},
            }
        },
    }


def test_serve_significance_is_statuses_and_messages() -> None:
    base = serve_significant(_apps("RUNNING"))
    noisy = _apps("RUNNING")
    noisy["controller_info"] = {"node_id": "other"}
    noisy["applications"]["app"]["last_deployed_time_s"] = 2.0
    assert serve_significant(noisy) == base
    assert serve_significant(_apps("DEPLOYING", "UPDATING")) != base
    assert serve_significant(_apps("RUNNING", "UNHEALTHY")) != base
    assert serve_significant(_apps("RUNNING", message="m")) != base
    assert serve_significant({"http_status": 0, "error": "refused"}) == ("error", 0, "refused")
    assert serve_significant({"applications": {}}) != serve_significant({"http_status": 404, "error": "x"})


@pytest.mark.parametrize(
    ("use_proxy", "ip", "expected"),
    [
        pytest.param(True, "10.0.0.1", "https://api:6443/api/v1/namespaces/ns/pods/p:8000/proxy", id="proxy"),
        pytest.param(False, "10.0.0.1", "http://10.0.0.1:8000", id="direct"),
        pytest.param(False, "fd00::1", "http://[fd00::1]:8000", id="direct-ipv6"),
    ],
)
def test_pod_base_url(use_proxy: bool, ip: str, expected: str) -> None:
    pod = PodEndpoint(namespace="ns", name="p", uid="u", ip=ip, port=8000)
    assert pod_base_url(pod, use_proxy=use_proxy, api_host="https://api:6443/") == expected
