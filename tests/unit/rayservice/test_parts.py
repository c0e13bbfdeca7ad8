"""Building blocks of the RayService reconcile: Go durations, names, Serve observations and configs,
Services and endpoints, the status write rule, and the prober contract."""

from __future__ import annotations

from datetime import timedelta

import pytest

from schema.decision import OBS_SERVE, OBS_SERVE_HEALTH, Snapshot
from schema.keys import ReconcileKey
from schema.probes import snapshot_targets
from services.reconciler.common.names import rand5
from services.reconciler.rayservice.godur import go_duration_string, parse_go_duration, parse_timeout
from services.reconciler.rayservice.kube_services import (
    ServiceBuildError,
    count_serve_endpoints,
    rayservice_serve_service,
    switch_patch,
)
from services.reconciler.rayservice.model import deletion_delay, goal_hash, read_model
from services.reconciler.rayservice.names import cluster_name
from services.reconciler.rayservice.serve_config import (
    ServeConfigError,
    config_hash,
    serve_config_json,
    submit_reason,
)
from services.reconciler.rayservice.serve_observation import read_observation
from services.reconciler.rayservice.status_draft import StatusDraft
from tests.unit.rayservice.builders import cluster_config, rayservice
from tests.unit.rayservice.sim import NOW, World


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        pytest.param("30m", 30 * 60 * 10**9, id="minutes"),
        pytest.param("1h30m", 90 * 60 * 10**9, id="compound"),
        pytest.param("1.5h", 90 * 60 * 10**9, id="fraction"),
        pytest.param("300ms", 300 * 10**6, id="millis"),
        pytest.param("-5m", -5 * 60 * 10**9, id="negative"),
        pytest.param("0", 0, id="zero"),
        pytest.param("30", None, id="no-unit"),
        pytest.param("", None, id="empty"),
        pytest.param("5 m", None, id="space"),
        pytest.param("1d", None, id="unknown-unit"),
    ],
)
def test_parse_go_duration(text: str, nanoseconds: int | None) -> None:
    assert parse_go_duration(text) == nanoseconds


def test_parse_timeout_falls_back_to_integer_seconds() -> None:
    assert parse_timeout("600") == 600 * 10**9
    assert parse_timeout("+30") == 30 * 10**9
    assert parse_timeout("soon") is None


@pytest.mark.parametrize(
    ("nanoseconds", "text"),
    [
        pytest.param(0, "0s", id="zero"),
        pytest.param(1_500_000, "1.5ms", id="millis"),
        pytest.param(2_000, "2µs", id="micros"),
        pytest.param(30 * 10**9, "30s", id="seconds"),
        pytest.param(5 * 60 * 10**9, "5m0s", id="minutes"),
        pytest.param(3600 * 10**9, "1h0m0s", id="hour"),
        pytest.param(90_500_000_000, "1m30.5s", id="fractional-seconds"),
        pytest.param(-(5 * 10**9), "-5s", id="negative"),
    ],
)
def test_go_duration_string(nanoseconds: int, text: str) -> None:
    assert go_duration_string(nanoseconds) == text


def test_cluster_names_are_deterministic_fresh_and_collision_free() -> None:
    first = cluster_name(rayservice="rs", uid="u1", generation=1, replaces="", taken=frozenset())
    assert first == cluster_name(rayservice="rs", uid="u1", generation=1, replaces="", taken=frozenset())
    assert first.startswith("rs-") and len(first) == 8
    assert first != cluster_name(rayservice="rs", uid="u1", generation=2, replaces="", taken=frozenset())
    assert first != cluster_name(rayservice="rs", uid="u2", generation=1, replaces="", taken=frozenset())
    assert first != cluster_name(rayservice="rs", uid="u1", generation=1, replaces=first, taken=frozenset())
    assert first != cluster_name(rayservice="rs", uid="u1", generation=1, replaces="", taken=frozenset({first}))
    assert all((c.isalnum() and c.islower()) or c.isdigit() for c in rand5("x"))


def test_goal_hash_ignores_suspend_and_replicas_and_cuts_groups() -> None:
    spec = cluster_config()
    assert goal_hash(spec) == goal_hash({**spec, "suspend": True})
    more = cluster_config()
    more["workerGroupSpecs"][0]["replicas"] = 7
    assert goal_hash(spec) == goal_hash(more)
    appended = cluster_config()
    appended["workerGroupSpecs"].append({**appended["workerGroupSpecs"][0], "groupName": "b"})
    assert goal_hash(appended) != goal_hash(spec)
    assert goal_hash(appended, groups=1) == goal_hash(spec)


def test_read_observation_maps_dashboard_answers() -> None:
    observation = read_observation(
        {
            "applications": {
                "": {"status": "RUNNING", "message": "", "deployments": {"d": {"status": "HEALTHY", "message": "ok"}}},
                "b": {"status": "DEPLOYING"},
            }
        }
    )
    assert observation is not None and not observation.error
    assert observation.applications == {
        "default": {"status": "RUNNING", "serveDeploymentStatuses": {"d": {"status": "HEALTHY", "message": "ok"}}},
        "b": {"status": "DEPLOYING"},
    }
    assert not observation.ready
    assert read_observation({"applications": {"a": {"status": "RUNNING"}}}).ready  # type: ignore[union-attr]
    assert not read_observation({"applications": {}}).ready  # type: ignore[union-attr]
    assert read_observation({"http_status": 503, "error": "down"}).error == "down"  # type: ignore[union-attr]
    assert read_observation({"http_status": 500}).error  # type: ignore[union-attr]
    assert read_observation(None) is None


def test_serve_config_conversion_and_submission_rule() -> None:
    assert serve_config_json("applications:\n  - name: a\n", target_capacity=40) == {
        "applications": [{"name": "a"}],
        "target_capacity": 40,
    }
    assert serve_config_json("") == {}
    with pytest.raises(ServeConfigError):
        serve_config_json("- just\n- a list\n")
    with pytest.raises(ServeConfigError):
        serve_config_json("a: [b")
    running = read_observation({"applications": {"a": {"status": "RUNNING"}}})
    empty = read_observation({"applications": {}})
    assert running is not None and empty is not None
    wanted = config_hash("x")
    assert submit_reason(recorded="", wanted=wanted, observation=running) is not None
    assert submit_reason(recorded=wanted, wanted=wanted, observation=empty) is not None
    assert submit_reason(recorded=config_hash("y"), wanted=wanted, observation=running) is not None
    assert submit_reason(recorded=wanted, wanted=wanted, observation=running) is None


def test_user_serve_service_port_rules() -> None:
    owner = {"kind": "RayService", "name": "rs"}
    cluster = {"metadata": {"name": "rs-abcde"}, "spec": cluster_config(serve_port=False)}
    with_user_port = read_model(
        rayservice(serveService={"spec": {"ports": [{"name": "serve", "port": 9999, "targetPort": 8000}]}})
    )
    service = rayservice_serve_service(with_user_port, cluster, owner=owner)
    assert service["spec"]["ports"] == [{"name": "serve", "port": 9999, "targetPort": 8000}]
    assert service["metadata"]["name"] == "rs-serve-svc"
    without = read_model(rayservice(serveService={"spec": {"ports": [{"name": "http", "port": 80}]}}))
    with pytest.raises(ServiceBuildError):
        rayservice_serve_service(without, cluster, owner=owner)
    with pytest.raises(ServiceBuildError):
        rayservice_serve_service(read_model(rayservice()), cluster, owner=owner)


def test_switch_patch_keeps_cluster_ip() -> None:
    existing = {"spec": {"clusterIP": "10.0.0.9", "clusterIPs": ["10.0.0.9"], "selector": {"ray.io/cluster": "a"}}}
    desired = {"spec": {"selector": {"ray.io/cluster": "b"}, "ports": []}}
    assert switch_patch(existing, desired) == [
        {
            "op": "add",
            "path": "/spec",
            "value": {
                "selector": {"ray.io/cluster": "b"},
                "ports": [],
                "clusterIP": "10.0.0.9",
                "clusterIPs": ["10.0.0.9"],
            },
        }
    ]


def test_endpoints_count_distinct_ready_pods() -> None:
    def slice_(service: str, *endpoints: tuple[str, bool]) -> dict[str, object]:
        return {
            "metadata": {"labels": {"kubernetes.io/service-name": service}},
            "endpoints": [{"conditions": {"ready": ready}, "targetRef": {"uid": uid}} for uid, ready in endpoints],
        }

    slices = [
        slice_("rs-serve-svc", ("a", True), ("b", False)),
        slice_("rs-serve-svc", ("a", True), ("c", True)),  # dual stack: same pod twice
        slice_("other", ("d", True)),
    ]
    assert count_serve_endpoints(slices, {"rs-serve-svc"}) == 2


def test_cluster_status_alone_does_not_write() -> None:
    draft = StatusDraft({"activeServiceStatus": {"rayClusterName": "c", "rayClusterStatus": {"state": "ready"}}})
    draft.set_field("activeServiceStatus", "rayClusterStatus", value={"state": "suspended"})
    assert not draft.should_write(incremental_gate=True)
    draft.set_field("activeServiceStatus", "targetCapacity", value=50)
    assert draft.should_write(incremental_gate=True)
    assert not draft.should_write(incremental_gate=False)


def test_condition_transition_time_moves_only_on_status_change() -> None:
    draft = StatusDraft({})
    draft.set_condition("Ready", status="False", reason="Initializing", message="m", now=NOW, observed_generation=1)
    later = NOW + timedelta(minutes=1)
    draft.set_condition(
        "Ready", status="False", reason="ZeroServeEndpoints", message="n", now=later, observed_generation=2
    )
    ready = draft.condition("Ready")
    assert (
        ready is not None
        and ready["lastTransitionTime"] == "2024-05-01T12:00:00Z"
        and ready["reason"] == "ZeroServeEndpoints"
    )
    draft.set_condition(
        "Ready", status="False", reason="Initializing", message="m", now=later, observed_generation=2, fresh=True
    )
    assert draft.condition("Ready")["lastTransitionTime"] == "2024-05-01T12:01:00Z"  # type: ignore[index]


def test_probe_targets_follow_active_and_pending_clusters() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    targets = snapshot_targets(world.snapshot("rs"))
    serve = [t for t in targets if t.entry_kind == OBS_SERVE]
    health = [t for t in targets if t.entry_kind == OBS_SERVE_HEALTH]
    active = world.status("rs")["activeServiceStatus"]["rayClusterName"]
    assert [t.entry_name for t in serve] == [active]
    assert serve[0].path == "/api/serve/applications/?api_type=declarative"
    assert serve[0].dashboard is not None
    assert serve[0].dashboard.cluster == active and serve[0].dashboard.port == 8265
    assert [(t.entry_name, t.pod.port if t.pod else 0, t.path) for t in health] == [
        (f"{active}-head", 8000, "/-/healthz")
    ]
    assert health[0].pod is not None
    assert health[0].pod.uid == world.existing("Pod", f"{active}-head")["metadata"]["uid"]
    world.update("RayService", "rs", lambda o: o["spec"].update(excludeHeadPodFromServeSvc=True), spec=True)
    assert [t for t in snapshot_targets(world.snapshot("rs")) if t.entry_kind == OBS_SERVE_HEALTH] == []
    empty = Snapshot(key=ReconcileKey(kind="RayService", namespace="default", name="rs"), entries={})
    assert snapshot_targets(empty) == []


def test_a_deletion_delay_beyond_int32_is_capped() -> None:
    model = read_model(rayservice(rayClusterDeletionDelaySeconds=251_687_736_000))
    assert model is not None and deletion_delay(model) == 2_147_483_647
