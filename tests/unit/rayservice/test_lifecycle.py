"""RayService lifecycle through the pure reconcile and the simulated cluster: samples reach Ready,
blue/green upgrades, Serve-config-only changes, upgradeStrategy None, head serve labels, failing apps,
the initializing timeout, suspend/resume and deletion with the finalizer (docs/behaviour.md#6)."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
import yaml

from schema.config import OperatorConfig, OperatorSwitches
from schema.messages import DeleteObject, PatchObject, PutServeConfig
from services.reconciler.raycluster import pod_bodies
from services.reconciler.raycluster.model import creator_crd, decode_view
from services.reconciler.rayservice import reconcile
from tests.unit.rayservice.builders import SERVE_CONFIG, cluster_config, load_sample, rayservice
from tests.unit.rayservice.sim import NOW, World, stamp

NOW_SUBSECOND = NOW + timedelta(milliseconds=700)


def active_name(world: World, name: str = "rs") -> str:
    return str(world.status(name).get("activeServiceStatus", {}).get("rayClusterName", ""))


def pending_name(world: World, name: str = "rs") -> str:
    return str(world.status(name).get("pendingServiceStatus", {}).get("rayClusterName", ""))


def edit_spec(world: World, name: str, mutate: Any) -> None:
    world.update("RayService", name, lambda o: mutate(o["spec"]), spec=True)


@pytest.mark.parametrize(
    ("sample", "serve_service", "port"),
    [
        pytest.param("ray-service.sample", "rayservice-sample-serve-svc", 8000, id="sample"),
        pytest.param(
            "ray-service.custom-serve-service", "custom-ray-serve-service-name", 8000, id="custom-serve-service"
        ),
        pytest.param("ray-service.different-port", "rayservice-sample-serve-svc", 9000, id="different-port"),
        pytest.param(
            "ray-service.no-ray-serve-replica", "rayservice-no-ray-serve-replica-serve-svc", 8000, id="no-serve-replica"
        ),
    ],
)
def test_samples_reach_ready_with_endpoints(sample: str, serve_service: str, port: int) -> None:
    world = World()
    obj = load_sample(sample)
    name = obj["metadata"]["name"]
    world.add(obj)
    world.settle(name)
    status = world.status(name)
    assert status["serviceStatus"] == "Running"
    assert status["numServeEndpoints"] > 0
    ready = world.condition(name, "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("True", "NonZeroServeEndpoints")
    cluster = status["activeServiceStatus"]["rayClusterName"]
    assert cluster.startswith(f"{name}-") and len(cluster) == len(name) + 6
    assert set(status["activeServiceStatus"]["applicationStatuses"]) == {
        app["name"] for app in yaml.safe_load(obj["spec"]["serveConfigV2"])["applications"]
    }
    serve = world.get("Service", serve_service)
    assert serve is not None
    assert serve["spec"]["selector"] == {"ray.io/cluster": cluster, "ray.io/serve": "true"}
    assert [p["port"] for p in serve["spec"]["ports"]] == [port]
    assert serve["metadata"]["labels"]["ray.io/serve"] == f"{name}-serve"
    head = world.get("Service", f"{name}-head-svc")
    assert head is not None and head["spec"]["selector"]["ray.io/cluster"] == cluster
    assert head["metadata"]["labels"]["ray.io/originated-from-crd"] == "RayService"
    raycluster = world.get("RayCluster", cluster)
    assert raycluster is not None
    assert raycluster["metadata"]["labels"]["ray.io/originated-from-cr-name"] == name
    assert raycluster["metadata"]["ownerReferences"][0]["kind"] == "RayService"
    annotations = raycluster["metadata"]["annotations"]
    assert annotations["ray.io/num-worker-groups"] == "1"
    assert "ray.io/hash-without-replicas-and-workers-to-delete" in annotations
    assert "raybus.io/serve-config-hash" in annotations
    assert len(world.puts) == 1
    assert world.puts[0].config == yaml.safe_load(obj["spec"]["serveConfigV2"])
    assert world.existing("Pod", f"{cluster}-head")["metadata"]["labels"]["ray.io/serve"] == "true"
    assert world.decisions[-1].wake_at is None  # nothing polls once settled


def test_custom_serve_service_keeps_user_metadata() -> None:
    world = World()
    obj = load_sample("ray-service.custom-serve-service")
    world.add(obj)
    world.settle("rayservice-sample")
    serve = world.get("Service", "custom-ray-serve-service-name")
    assert serve is not None
    assert serve["spec"]["type"] == "LoadBalancer"
    assert serve["metadata"]["labels"]["custom-label"] == "custom-ray-serve-service-label"
    assert serve["metadata"]["annotations"]["custom-annotation"] == "custom-ray-serve-service-annotation"
    assert world.get("Service", "rayservice-sample-serve-svc") is None


def test_first_passes_finalizer_then_pending_cluster_then_create() -> None:
    world = World()
    world.add(rayservice(finalizer=False))
    first = world.reconcile("rs")
    assert first.rules == ("6.1/add-finalizer",)
    assert world.existing("RayService", "rs")["metadata"]["finalizers"] == ["ray.io/rayservice-finalizer"]
    second = world.reconcile("rs")
    assert "6.2/prepare-new-cluster" in second.rules
    pending = pending_name(world)
    assert pending.startswith("rs-")
    ready = world.condition("rs", "Ready")
    assert ready is not None and ready["reason"] == "Initializing"
    step = world.steps("pendingCluster")[0]
    assert (step.from_value, step.to_value, step.message) == ("", pending, "pending cluster created")
    third = world.reconcile("rs")
    assert "6.1/create-pending-cluster" in third.rules
    assert world.get("RayCluster", pending) is not None


def test_cluster_carries_rayservice_specifics_for_the_raycluster_controller() -> None:
    """docs/behaviour.md#3.4 step 5, #3.7, #3.12: the RayCluster controller derives them from the origin labels."""
    world = World()
    world.auto_ready = False
    world.add(rayservice())
    for _ in range(3):
        world.reconcile("rs")
    cluster = world.get("RayCluster", pending_name(world))
    assert cluster is not None
    view = decode_view(cluster)
    assert creator_crd(view) == "RayService"
    head = pod_bodies.head_pod(view, world.config, name="h", spec_hash="x")
    worker = pod_bodies.worker_pod(view, view.spec.worker_group_specs[0], world.config, name="w", extra_labels={})  # type: ignore[index]
    assert head["metadata"]["labels"]["ray.io/serve"] == "false"
    assert worker["metadata"]["labels"]["ray.io/serve"] == "true"
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["RAY_timeout_ms_task_wait_for_death_info"] == "0"
    assert env["RAY_gcs_server_request_timeout_seconds"] == "5"
    assert env["RAY_SERVE_KV_TIMEOUT_S"] == "5"
    head_env = {e["name"]: e.get("value") for e in head["spec"]["containers"][0]["env"]}
    assert head_env["RAY_USAGE_STATS_EXTRA_TAGS"].endswith("kuberay_crd=RayService")
    readiness = worker["spec"]["containers"][0]["readinessProbe"]
    assert readiness["failureThreshold"] == 1
    assert "localhost:8000/-/healthz" in readiness["exec"]["command"][-1]


def test_blue_green_upgrade_switches_selector_then_deletes_old_cluster_after_delay() -> None:
    world = World()
    world.add(rayservice(rayClusterDeletionDelaySeconds=30))
    world.settle("rs")
    old = active_name(world)
    edit_spec(
        world,
        "rs",
        lambda s: s["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0].update(
            image="rayproject/ray:2.53.0"
        ),
    )
    decision = world.settle("rs")
    new = active_name(world)
    assert new != old and new.startswith("rs-")
    assert pending_name(world) == ""
    assert world.existing("Service", "rs-serve-svc")["spec"]["selector"]["ray.io/cluster"] == new
    assert world.existing("Service", "rs-head-svc")["spec"]["selector"]["ray.io/cluster"] == new
    traffic = world.steps("traffic")[-1]
    assert (traffic.from_value, traffic.to_value) == (old, new)
    assert traffic.attributes["from"] == old and traffic.attributes["to"] == new
    promotion = world.steps("activeCluster")[-1]
    assert (promotion.from_value, promotion.to_value) == (old, new)
    upgrade = [t for t in world.steps("condition/UpgradeInProgress") if t.to_value == "True"]
    assert upgrade and upgrade[0].reason == "BothActivePendingClustersExist"
    # The old cluster is dangling: scheduled durably, deleted only when the delay has passed.
    old_cluster = world.get("RayCluster", old)
    assert old_cluster is not None
    deadline = old_cluster["metadata"]["annotations"]["raybus.io/delete-after"]
    assert deadline == stamp(world.now + timedelta(seconds=30))
    assert decision.wake_at == world.now + timedelta(seconds=30)
    world.advance(29)
    assert not any(isinstance(c, DeleteObject) for c in world.settle("rs").commands)
    assert world.get("RayCluster", old) is not None
    world.advance(1)
    world.settle("rs")
    assert world.get("RayCluster", old) is None
    deleted = world.steps("clusterDeleted")
    assert [(t.from_value, t.reason) for t in deleted] == [(old, "DeletionDelayPassed")]
    assert world.status("rs")["serviceStatus"] == "Running"
    assert world.settle("rs").wake_at is None


def test_deletion_delay_survives_a_restart_and_a_replay() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    old = active_name(world)
    edit_spec(world, "rs", lambda s: s["rayClusterConfig"]["workerGroupSpecs"][0].update(groupName="other"))
    world.settle("rs")
    scheduled = world.existing("RayCluster", old)["metadata"]["annotations"]["raybus.io/delete-after"]
    world.advance(10)
    # Any later pass (a fresh worker, a replay) reads the same deadline: no restart of the delay.
    decision = reconcile(world.snapshot("rs"), world.now, world.config)
    assert decision.wake_at == world.now + timedelta(seconds=50)
    assert not any(isinstance(c, PatchObject) and c.target.name == old for c in decision.commands)
    assert world.existing("RayCluster", old)["metadata"]["annotations"]["raybus.io/delete-after"] == scheduled


def test_deletion_delay_is_never_cut_short_by_whole_second_timestamps() -> None:
    world = World(now=NOW_SUBSECOND)
    world.add(rayservice(rayClusterDeletionDelaySeconds=2))
    world.settle("rs")
    old = active_name(world)
    edit_spec(world, "rs", lambda s: s["rayClusterConfig"]["workerGroupSpecs"][0].update(groupName="other"))
    decision = world.settle("rs")
    scheduled = world.existing("RayCluster", old)["metadata"]["annotations"]["raybus.io/delete-after"]
    assert scheduled == "2024-05-01T12:00:03Z"  # 12:00:00.7 + 2 s, rounded up
    assert decision.wake_at == NOW_SUBSECOND.replace(microsecond=0) + timedelta(seconds=3)
    world.advance_to(NOW_SUBSECOND + timedelta(seconds=2))  # 12:00:02.7: the delay has not passed
    world.settle("rs")
    assert world.get("RayCluster", old) is not None
    world.advance_to(decision.wake_at)
    world.settle("rs")
    assert world.get("RayCluster", old) is None


def test_serve_config_only_change_goes_to_the_active_cluster() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    cluster = active_name(world)
    new_config = SERVE_CONFIG.replace("num_replicas: 1\n  - name: math_app", "num_replicas: 2\n  - name: math_app")
    assert new_config != SERVE_CONFIG
    edit_spec(world, "rs", lambda s: s.update(serveConfigV2=new_config))
    world.settle("rs")
    assert active_name(world) == cluster and pending_name(world) == ""
    assert len(world.of_kind("RayCluster")) == 1
    assert len(world.puts) == 2
    assert world.puts[-1].dashboard.cluster == cluster
    assert world.puts[-1].config["applications"][0]["deployments"][0]["num_replicas"] == 2


def test_unchanged_config_is_not_resubmitted_after_a_restart() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    assert len(world.puts) == 1
    # A new worker (no memory at all) reconciles the same key: the annotation says it was submitted.
    decision = reconcile(world.snapshot("rs"), world.now + timedelta(hours=1), world.config)
    assert not any(isinstance(c, PutServeConfig) for c in decision.commands)


def test_cluster_that_lost_its_applications_is_resubmitted() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    cluster = active_name(world)
    world.dashboards.pop(cluster)  # head restarted without GCS FT: the dashboard reports no apps
    world.settle("rs")
    assert len(world.puts) == 2 and world.puts[-1].dashboard.cluster == cluster
    assert world.status("rs")["serviceStatus"] == "Running"


def test_upgrade_strategy_none_ignores_cluster_spec_changes() -> None:
    world = World()
    world.add(rayservice(upgradeStrategy={"type": "None"}))
    world.settle("rs")
    cluster = active_name(world)
    edit_spec(
        world,
        "rs",
        lambda s: s["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0].update(image="other"),
    )
    world.settle("rs")
    assert active_name(world) == cluster and pending_name(world) == ""
    assert len(world.of_kind("RayCluster")) == 1
    assert world.status("rs")["serviceStatus"] == "Running"


def test_zero_downtime_switch_off_ignores_cluster_spec_changes() -> None:
    world = World(config=OperatorConfig(switches=OperatorSwitches(enable_zero_downtime=False)))
    world.add(rayservice())
    world.settle("rs")
    edit_spec(world, "rs", lambda s: s["rayClusterConfig"].update(rayVersion="2.53.0"))
    world.settle("rs")
    assert len(world.of_kind("RayCluster")) == 1 and pending_name(world) == ""


def test_upgrade_strategy_new_cluster_wins_over_the_zero_downtime_switch() -> None:
    world = World(config=OperatorConfig(switches=OperatorSwitches(enable_zero_downtime=False)))
    world.add(rayservice(upgradeStrategy={"type": "NewCluster"}))
    world.settle("rs")
    old = active_name(world)
    edit_spec(world, "rs", lambda s: s["rayClusterConfig"].update(rayVersion="2.53.0"))
    world.settle("rs")
    assert active_name(world) != old


def test_appended_worker_group_updates_the_cluster_in_place() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    cluster = active_name(world)
    extra = copy.deepcopy(cluster_config()["workerGroupSpecs"][0])
    extra["groupName"] = "extra"
    edit_spec(world, "rs", lambda s: s["rayClusterConfig"]["workerGroupSpecs"].append(extra))
    world.settle("rs")
    assert active_name(world) == cluster and len(world.of_kind("RayCluster")) == 1
    updated = world.get("RayCluster", cluster)
    assert updated is not None
    assert [g["groupName"] for g in updated["spec"]["workerGroupSpecs"]] == ["small-group", "extra"]
    assert updated["metadata"]["annotations"]["ray.io/num-worker-groups"] == "2"
    assert "raybus.io/serve-config-hash" in updated["metadata"]["annotations"]
    assert any(e.reason == "UpdatedRayCluster" for e in world.events)
    assert len(world.puts) == 1  # the durable serve-config record survives the in-place update


def test_replica_changes_do_not_prepare_a_new_cluster() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    edit_spec(world, "rs", lambda s: s["rayClusterConfig"]["workerGroupSpecs"][0].update(replicas=3, maxReplicas=9))
    world.settle("rs")
    assert len(world.of_kind("RayCluster")) == 1 and pending_name(world) == ""


def test_other_operator_version_updates_the_active_cluster_in_place() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    cluster = active_name(world)
    world.update(
        "RayCluster", cluster, lambda o: o["metadata"]["annotations"].update({"ray.io/kuberay-version": "v1.3.0"})
    )
    world.settle("rs")
    assert (
        world.existing("RayCluster", cluster)["metadata"]["annotations"]["ray.io/kuberay-version"]
        == world.config.version
    )


def test_pending_apps_deploy_failed_no_traffic_moves() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    old = active_name(world)
    edit_spec(world, "rs", lambda s: s["rayClusterConfig"].update(rayVersion="2.53.0"))
    world.reconcile("rs")
    pending = pending_name(world)
    world.app_status[pending] = "DEPLOY_FAILED"
    world.settle("rs")
    assert active_name(world) == old and pending_name(world) == pending
    assert world.existing("Service", "rs-serve-svc")["spec"]["selector"]["ray.io/cluster"] == old
    apps = world.status("rs")["pendingServiceStatus"]["applicationStatuses"]
    assert {a["status"] for a in apps.values()} == {"DEPLOY_FAILED"}
    assert world.status("rs")["serviceStatus"] == "Running"
    upgrading = world.condition("rs", "UpgradeInProgress")
    assert upgrading is not None and upgrading["status"] == "True"
    # Fixed on the dashboard side: the cut-over happens.
    world.app_status[pending] = "RUNNING"
    world.settle("rs")
    assert active_name(world) == pending


def test_head_label_false_when_excluded_from_serve_service() -> None:
    world = World()
    world.add(rayservice(excludeHeadPodFromServeSvc=True))
    world.settle("rs")
    cluster = active_name(world)
    assert world.existing("Pod", f"{cluster}-head")["metadata"]["labels"]["ray.io/serve"] == "false"
    assert world.status("rs")["numServeEndpoints"] == 1  # only the worker


def test_head_label_follows_proxy_health() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    cluster = active_name(world)
    pod = world.get("Pod", f"{cluster}-head")
    assert pod is not None and pod["metadata"]["labels"]["ray.io/serve"] == "true"
    world.observations["obs-servehealth"][f"{cluster}-head"] = {"healthy": False, "http_status": 503}
    world.reconcile("rs")
    assert world.existing("Pod", f"{cluster}-head")["metadata"]["labels"]["ray.io/serve"] == "false"
    # An answer about an earlier pod of the same name is ignored.
    world.observations["obs-servehealth"][f"{cluster}-head"] = {"healthy": True, "pod_uid": "someone-else"}
    decision = world.reconcile("rs")
    assert not any(isinstance(c, PatchObject) and c.target.kind == "Pod" for c in decision.commands)


def test_endpoints_dropping_to_zero_and_back() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    for slice_ in world.of_kind("EndpointSlice"):
        for endpoint in slice_["endpoints"]:
            endpoint["conditions"]["ready"] = False
    world.reconcile("rs")
    ready = world.condition("rs", "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "ZeroServeEndpoints")
    assert world.status("rs").get("serviceStatus", "") == ""
    world.refresh_endpoints()
    world.reconcile("rs")
    assert world.status("rs")["serviceStatus"] == "Running"


def test_initializing_timeout_is_terminal_and_cleans_up() -> None:
    world = World()
    world.add(rayservice(annotations={"ray.io/initializing-timeout": "5m"}, rayClusterDeletionDelaySeconds=10))
    world.reconcile("rs")
    world.reconcile("rs")
    cluster = pending_name(world)
    world.app_status[cluster] = "DEPLOYING"
    decision = world.settle("rs")
    assert world.status("rs").get("serviceStatus", "") == ""
    assert decision.wake_at == world.now + timedelta(minutes=5)
    world.advance_to(decision.wake_at)
    world.settle("rs")
    ready = world.condition("rs", "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "InitializingTimeout")
    assert ready["message"] == (
        "RayService failed to become ready within the configured timeout of 5m0s. Time spent initializing: 5m0s"
    )
    assert any(e.reason == "RayServiceInitializingTimeout" and e.event_type == "Warning" for e in world.events)
    assert pending_name(world) == "" and active_name(world) == ""
    world.run_timers("rs")
    assert world.of_kind("RayCluster") == []
    assert world.steps("clusterDeleted")[-1].from_value == cluster
    # Terminal: even a fixed dashboard does not bring it back.
    world.app_status[cluster] = "RUNNING"
    decision = world.settle("rs")
    assert decision.rules == ("6.1/initializing-timeout-terminal",)
    assert world.of_kind("RayCluster") == []


def test_initializing_timeout_in_integer_seconds_is_not_hit_when_ready_in_time() -> None:
    world = World()
    world.add(rayservice(annotations={"ray.io/initializing-timeout": "600"}))
    decision = world.settle("rs")
    assert world.status("rs")["serviceStatus"] == "Running"
    assert decision.wake_at is None


def test_suspend_then_resume() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    world.update("RayService", "rs", lambda o: o["spec"].update(suspend=True), spec=True)
    world.reconcile("rs")
    suspending = world.condition("rs", "Suspending")
    assert suspending is not None and (suspending["status"], suspending["reason"]) == ("True", "SuspendRequested")
    assert world.status("rs").get("serviceStatus", "") == ""
    assert world.of_kind("RayCluster")  # nothing deleted in the request pass
    world.settle("rs")
    assert world.of_kind("RayCluster") == []
    assert world.get("Service", "rs-serve-svc") is None and world.get("Service", "rs-head-svc") is None
    suspended = world.condition("rs", "Suspended")
    assert suspended is not None and (suspended["status"], suspended["reason"]) == ("True", "SuspendComplete")
    for type_ in ("Suspending", "Ready", "UpgradeInProgress", "RollbackInProgress"):
        condition = world.condition("rs", type_)
        assert condition is not None and (condition["status"], condition["reason"]) == ("False", "SuspendComplete")
    assert world.settle("rs").rules == ("6.5/stay-suspended",)
    world.advance(60)
    world.update("RayService", "rs", lambda o: o["spec"].update(suspend=False), spec=True)
    world.reconcile("rs")
    resumed = world.condition("rs", "Suspended")
    assert resumed is not None and (resumed["status"], resumed["reason"]) == ("False", "RayServiceResumed")
    ready = world.condition("rs", "Ready")
    assert ready is not None and ready["reason"] == "Initializing" and ready["lastTransitionTime"] == stamp(world.now)
    world.settle("rs")
    assert world.status("rs")["serviceStatus"] == "Running"
    assert len(world.of_kind("RayCluster")) == 1


def test_suspend_flag_is_ignored_while_suspending() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    world.update("RayService", "rs", lambda o: o["spec"].update(suspend=True), spec=True)
    world.reconcile("rs")
    world.update("RayService", "rs", lambda o: o["spec"].update(suspend=False), spec=True)
    world.reconcile("rs")
    world.play_actors("rs")
    world.reconcile("rs")
    suspended = world.condition("rs", "Suspended")
    assert suspended is not None and suspended["status"] == "True"


def test_deletion_deletes_every_cluster_then_removes_the_finalizer() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    edit_spec(world, "rs", lambda s: s["rayClusterConfig"].update(rayVersion="2.53.0"))
    world.reconcile("rs")
    world.reconcile("rs")  # pending created: two clusters now
    assert len(world.of_kind("RayCluster")) == 2
    world.delete("RayService", "rs")
    assert world.get("RayService", "rs") is not None  # held by the finalizer
    decision = world.reconcile("rs")
    deletes = [c for c in decision.commands if isinstance(c, DeleteObject)]
    assert sorted(c.target.name for c in deletes) == sorted(
        c["metadata"]["name"] for c in world.objects.values() if c["kind"] == "RayCluster"
    ) or not world.of_kind("RayCluster")
    assert all(c.propagation == "Background" for c in deletes)
    world.settle("rs")
    assert world.get("RayService", "rs") is None
    assert world.of_kind("RayCluster") == []
    assert {t.reason for t in world.steps("clusterDeleted")} == {"RayServiceDeleted"}


def test_managed_by_another_controller_is_skipped() -> None:
    world = World()
    world.add(rayservice(managedBy="kueue.x-k8s.io/multikueue"))
    assert world.reconcile("rs").rules == ("6.1/managed-by-external",)


def test_dashboard_error_observation_ends_the_pass_without_status_write() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    cluster = active_name(world)
    world.observations["obs-serve"][cluster] = {"http_status": 0, "error": "connection refused"}
    decision = world.reconcile("rs")
    assert "6.1/serve-dashboard-error" in decision.rules
    assert not decision.transitions()
    assert not any(c for c in decision.commands if type(c).__name__ == "PatchStatus")


def test_invalid_serve_config_yaml_is_an_event() -> None:
    world = World()
    world.add(rayservice(serveConfigV2="applications: [unclosed"))
    world.settle("rs")
    failures = [e for e in world.events if e.reason == "FailedToUpdateServeApplications"]
    assert failures and failures[0].event_type == "Warning"
    assert world.puts == []


def test_missing_serve_port_is_reported() -> None:
    world = World()
    world.add(rayservice(rayClusterConfig=cluster_config(serve_port=False)))
    world.settle("rs")
    assert any(e.reason == "FailedToCreateService" for e in world.events)
    assert world.get("Service", "rs-serve-svc") is None


def test_created_suspended_never_creates_a_cluster() -> None:
    world = World()
    world.add(rayservice(suspend=True))
    world.settle("rs")
    assert world.of_kind("RayCluster") == []
    suspended = world.condition("rs", "Suspended")
    assert suspended is not None and suspended["status"] == "True"


def test_serve_config_record_rides_with_the_put() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    puts = [c for d in world.decisions for c in d.commands if isinstance(c, PutServeConfig)]
    assert len(puts) == 1
    record = puts[0].record
    assert record is not None and record.target.kind == "RayCluster"
    assert record.target.name == puts[0].dashboard.cluster
    assert "raybus.io/serve-config-hash" in record.patch["metadata"]["annotations"]  # type: ignore[call-overload]
    loose = [
        c for d in world.decisions for c in d.commands if isinstance(c, PatchObject) and c.target.kind == "RayCluster"
    ]
    assert not any("raybus.io/serve-config-hash" in str(c.patch) for c in loose)


def test_a_failed_put_is_not_recorded_and_is_retried_after_two_seconds() -> None:
    world = World()
    world.add(rayservice())
    world.settle("rs")
    cluster = active_name(world)
    recorded = world.existing("RayCluster", cluster)["metadata"]["annotations"]["raybus.io/serve-config-hash"]
    world.unreachable_dashboards.add(cluster)
    edit_spec(
        world, "rs", lambda s: s.update(serveConfigV2=s["serveConfigV2"].replace("num_replicas: 1", "num_replicas: 3"))
    )
    failed = world.reconcile("rs")  # the dashboard refuses the PUT: no event follows, only the timer
    assert world.failed_puts and "'num_replicas': 3" in str(world.failed_puts[-1].config)
    assert world.existing("RayCluster", cluster)["metadata"]["annotations"]["raybus.io/serve-config-hash"] == recorded
    assert failed.wake_at == world.now + timedelta(seconds=2)  # KubeRay's requeue
    world.unreachable_dashboards.clear()
    world.advance(2)
    retried = world.reconcile("rs")
    assert any(isinstance(c, PutServeConfig) for c in retried.commands)
    world.settle("rs")
    assert world.existing("RayCluster", cluster)["metadata"]["annotations"]["raybus.io/serve-config-hash"] != recorded
    assert "'num_replicas': 3" in str(world.dashboards[cluster])
