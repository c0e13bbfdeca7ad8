"""Objects besides pods (docs/behaviour.md#4.1 step 11, #4.6): Services, Ingress, auth Secret, GCS FT finalizer flow."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from schema.config import FeatureGates
from schema.decision import Decision
from schema.messages import GENERATE_ANNOTATION, CreateObject, DeleteCollection, PatchObject, PatchStatus
from tests.unit.raycluster import builders
from tests.unit.raycluster.sim import World


def created(decision: Decision, kind: str) -> list[dict[str, Any]]:
    return [c.body for c in decision.commands if isinstance(c, CreateObject) and c.target.kind == kind]


def by_name(decision: Decision, kind: str, name: str) -> dict[str, Any]:
    return next(b for b in created(decision, kind) if b["metadata"]["name"] == name)


# -- Services ---------------------------------------------------------------------------------------------
def test_head_service_cluster_ip_switch() -> None:
    decision = World(builders.cluster(), config=builders.config(enable_ray_head_cluster_ip_service=True)).step()
    svc = by_name(decision, "Service", "rc-head-svc")
    assert "clusterIP" not in svc["spec"] and "publishNotReadyAddresses" not in svc["spec"]


@pytest.mark.parametrize(
    ("service_type", "headless"),
    [
        pytest.param("", True, id="unset"),
        pytest.param("ClusterIP", True, id="cluster-ip"),
        pytest.param("NodePort", False, id="node-port"),
        pytest.param("LoadBalancer", False, id="load-balancer"),
    ],
)
def test_head_service_headless_rule(service_type: str, headless: bool) -> None:
    obj = builders.cluster()
    obj["spec"]["headGroupSpec"]["serviceType"] = service_type
    svc = by_name(World(obj).step(), "Service", "rc-head-svc")
    assert (svc["spec"].get("clusterIP") == "None") is headless
    assert svc["spec"].get("type", "") == service_type


def test_head_service_default_ports_and_annotations() -> None:
    obj = builders.cluster(headServiceAnnotations={"a": "b"})
    container = obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    container["ports"] = [{"containerPort": 7777}]
    svc = by_name(World(obj).step(), "Service", "rc-head-svc")
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("7777-port", 7777), ("metrics", 8080)]
    assert svc["metadata"]["annotations"] == {"a": "b"}
    del container["ports"]
    svc = by_name(World(obj).step(), "Service", "rc-head-svc")
    assert [p["name"] for p in svc["spec"]["ports"]] == ["client", "dashboard", "gcs-server", "metrics", "serve"]


def test_head_service_is_never_updated_and_duplicates_are_an_error() -> None:
    world = World(builders.cluster(headServiceAnnotations={"a": "b"}))
    world.converge()
    world.update_spec(lambda s: s.update(headServiceAnnotations={"a": "c"}))
    assert world.step().commands == ()
    svc = dict(world.objects[("Service", "rc-head-svc")])
    world.objects[("Service", "other")] = {**svc, "metadata": {**svc["metadata"], "name": "other"}}
    decision = world.step()
    assert "4.1/multiple-head-services" in decision.rules
    assert not created(decision, "Pod")
    assert decision.wake_at == world.now + timedelta(seconds=2)


def test_headless_service_for_multihost_groups_only() -> None:
    assert not [
        b for b in created(World(builders.cluster()).step(), "Service") if b["metadata"]["name"] == "rc-headless"
    ]
    obj = builders.cluster(groups=[builders.group("tpu", num_of_hosts=2)])
    svc = by_name(World(obj).step(), "Service", "rc-headless")
    assert svc["spec"] == {
        "clusterIP": "None",
        "selector": {"ray.io/cluster": "rc", "ray.io/node-type": "worker"},
        "publishNotReadyAddresses": True,
    }
    assert svc["metadata"]["labels"] == {"ray.io/headless-worker-svc": "rc"}


def test_serve_service_annotation() -> None:
    obj = builders.cluster(annotations={"ray.io/enable-serve-service": "true"})
    container = obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    container["ports"] = [{"containerPort": 8000, "name": "serve"}, {"containerPort": 9000, "name": "serve-grpc"}]
    decision = World(obj).step()
    svc = by_name(decision, "Service", "rc-serve-svc")
    assert svc["metadata"]["labels"] == {
        "ray.io/originated-from-cr-name": "rc",
        "ray.io/originated-from-crd": "RayCluster",
        "ray.io/serve": "rc-serve",
    }
    assert svc["spec"]["selector"] == {"ray.io/cluster": "rc"}
    assert [p["name"] for p in svc["spec"]["ports"]] == ["serve", "serve-grpc"]
    labels = {b["metadata"]["labels"]["ray.io/node-type"]: b["metadata"]["labels"] for b in created(decision, "Pod")}
    assert labels["head"]["ray.io/serve"] == "false" and labels["worker"]["ray.io/serve"] == "true"


def test_serve_service_without_serve_ports_is_an_error() -> None:
    obj = builders.cluster(annotations={"ray.io/enable-serve-service": "true"})
    obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 1, "name": "x"}]
    decision = World(obj).step()
    assert "4.1/serve-service-no-ports" in decision.rules and not created(decision, "Pod")


# -- Ingress ----------------------------------------------------------------------------------------------
def test_ingress_created_and_updated() -> None:
    obj = builders.cluster(annotations={"kubernetes.io/ingress.class": "nginx", "team": "a"})
    obj["spec"]["headGroupSpec"]["enableIngress"] = True
    obj["spec"]["headGroupSpec"]["ingressOptions"] = {"host": "ray.example.com", "path": "/ray"}
    world = World(obj)
    decision = world.step()
    ing = by_name(decision, "Ingress", "rc-head-ingress")
    assert ing["spec"]["ingressClassName"] == "nginx"
    assert ing["metadata"]["annotations"] == {"team": "a"}
    rule = ing["spec"]["rules"][0]
    assert rule["host"] == "ray.example.com"
    assert rule["http"]["paths"][0] == {
        "path": "/ray",
        "pathType": "Prefix",
        "backend": {"service": {"name": "rc-head-svc", "port": {"number": 8265}}},
    }
    assert any(e.reason == "CreatedIngress" for e in world.events)
    world.converge()
    world.cluster["metadata"]["annotations"]["team"] = "b"
    decision = world.step()
    (patch,) = [c for c in decision.commands if isinstance(c, PatchObject)]
    assert patch.patch == {"metadata": {"annotations": {"team": "b"}}}
    assert any(e.reason == "UpdatedIngress" for e in world.events)
    assert world.step().commands == ()


def test_foreign_ingress_is_left_alone() -> None:
    obj = builders.cluster()
    obj["spec"]["headGroupSpec"]["enableIngress"] = True
    world = World(obj)
    world.objects[("Ingress", "rc-head-ingress")] = {
        "metadata": {"name": "rc-head-ingress", "namespace": "default", "labels": {"ray.io/cluster": "rc"}},
        "spec": {},
    }
    decision = world.step()
    assert "4.1/ingress-not-owned" in decision.rules
    assert not created(decision, "Ingress")
    assert any(e.reason == "FailedToCreateIngress" and e.event_type == "Warning" for e in world.events)


# -- auth --------------------------------------------------------------------------------------------------
def test_auth_secret_generated_by_applier() -> None:
    obj = builders.cluster(authOptions={"mode": "token"})
    world = World(obj)
    decision = world.step()
    secret = by_name(decision, "Secret", "rc")
    assert secret["metadata"]["annotations"] == {GENERATE_ANNOTATION: "auth_token"}
    assert "data" not in secret and "stringData" not in secret
    assert secret["metadata"]["labels"] == {"ray.io/cluster": "rc"}
    for pod in created(decision, "Pod"):
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "rc", "key": "auth_token"}}
    assert not created(world.step(), "Secret")


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"mode": "token", "secretName": "mine"}, id="user-secret"),
        pytest.param({"mode": "disabled"}, id="disabled"),
    ],
)
def test_no_auth_secret(options: dict[str, Any]) -> None:
    assert not created(World(builders.cluster(authOptions=options)).step(), "Secret")


def test_k8s_token_auth_projected_volume() -> None:
    obj = builders.cluster(authOptions={"mode": "token", "enableK8sTokenAuth": True}, rayVersion="2.55.0")
    decision = World(obj).step()
    assert not created(decision, "Secret")
    head = next(p for p in created(decision, "Pod") if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    container = head["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RAY_ENABLE_K8S_TOKEN_AUTH"] == "true" and "RAY_AUTH_TOKEN" not in env
    assert {"mountPath": "/var/run/secrets/ray.io/serviceaccount", "name": "ray-token", "readOnly": True} in container[
        "volumeMounts"
    ]


# -- GCS fault tolerance ---------------------------------------------------------------------------------
def ft_cluster(**options: Any) -> dict[str, Any]:
    return builders.cluster(gcsFaultToleranceOptions={"redisAddress": "redis:6379", **options})


def test_gcs_ft_finalizer_added_first() -> None:
    world = World(ft_cluster())
    decision = world.step()
    assert decision.rules == ("2.5/add-gcs-ft-finalizer",)
    (patch,) = decision.commands
    assert isinstance(patch, PatchObject)
    assert patch.patch == {"metadata": {"finalizers": ["ray.io/gcs-ft-redis-cleanup-finalizer"]}}
    assert patch.resource_version
    assert decision.wake_at == world.now + timedelta(seconds=2)
    assert "4.2/create-head-pod" in world.step().rules


def test_gcs_ft_cleanup_switch_off_adds_no_finalizer() -> None:
    decision = World(ft_cluster(), config=builders.config(enable_gcs_ft_redis_cleanup=False)).step()
    assert "2.5/add-gcs-ft-finalizer" not in decision.rules


def test_gcs_ft_head_wiring() -> None:
    obj = ft_cluster(redisPassword={"valueFrom": {"secretKeyRef": {"name": "redis", "key": "pw"}}})
    world = World(obj)
    world.step()
    decision = world.step()
    head = next(p for p in created(decision, "Pod") if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    worker = next(p for p in created(decision, "Pod") if p["metadata"]["labels"]["ray.io/node-type"] == "worker")
    assert head["metadata"]["annotations"]["ray.io/ft-enabled"] == "true"
    assert head["metadata"]["annotations"]["ray.io/external-storage-namespace"] == builders.UID
    env = {e["name"]: e for e in head["spec"]["containers"][0]["env"]}
    assert env["RAY_external_storage_namespace"]["value"] == builders.UID
    assert env["RAY_REDIS_ADDRESS"]["value"] == "redis:6379"
    assert env["REDIS_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "redis", "key": "pw"}}
    assert "--redis-password=$REDIS_PASSWORD" in head["spec"]["containers"][0]["args"][0]
    worker_env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert worker_env["RAY_gcs_rpc_server_reconnect_timeout_s"] == "600"


def test_gcs_ft_deletion_flow() -> None:
    world = World(ft_cluster())
    world.converge()
    assert world.cluster["metadata"]["finalizers"] == ["ray.io/gcs-ft-redis-cleanup-finalizer"]
    world.cluster["metadata"]["deletionTimestamp"] = "2025-03-01T12:00:00Z"
    decision = world.step()
    selectors = [c.label_selector for c in decision.commands if isinstance(c, DeleteCollection)]
    assert selectors == ["ray.io/cluster=rc,ray.io/node-type=head", "ray.io/cluster=rc,ray.io/node-type=worker"]
    assert decision.wake_at == world.now + timedelta(seconds=10)
    assert world.step().commands == ()  # pods terminating: wait, nothing re-issued
    world.settle()
    decision = world.step()
    (job,) = created(decision, "Job")
    assert job["metadata"]["name"] == "rc-redis-cleanup"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 300
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and len(pod["containers"]) == 1
    assert "livenessProbe" not in pod["containers"][0]
    assert job["spec"]["template"]["metadata"]["labels"]["ray.io/node-type"] == "redis-cleanup"
    assert any(e.reason == "CreatedRedisCleanupJob" for e in world.events)
    assert decision.wake_at == world.now + timedelta(seconds=2)
    assert "4.6/cleanup-running" in world.step().rules
    world.objects[("Job", "rc-redis-cleanup")]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    decision = world.step()
    assert "4.6/cleanup-finished" in decision.rules
    assert ("RayCluster", "rc") not in world.objects  # finalizer removed: gone


def test_gcs_ft_force_removal_after_timeout() -> None:
    world = World(ft_cluster())
    world.converge()
    world.cluster["metadata"]["annotations"] = {"ray.io/gcs-ft-deletion-timeout": "60"}
    world.cluster["metadata"]["deletionTimestamp"] = "2025-03-01T12:00:00Z"
    world.step()
    world.settle()
    world.step()  # cleanup Job created, never finishes
    world.advance(61)
    decision = world.step()
    assert "4.6/force-remove-finalizer" in decision.rules
    assert any(e.reason == "ForceDeletedStuckCluster" and e.event_type == "Warning" for e in world.events)


def test_deleting_without_finalizer_does_nothing() -> None:
    world = World(builders.cluster())
    world.converge()
    world.cluster["metadata"]["deletionTimestamp"] = "2025-03-01T12:00:00Z"
    world.cluster["metadata"]["finalizers"] = ["other"]
    decision = world.step()
    assert decision.rules == ("4.1/being-deleted",) and decision.commands == ()


def test_rocksdb_backend_pvc_and_wiring() -> None:
    obj = builders.cluster(gcsFaultToleranceOptions={"backend": "rocksdb", "storage": {"subPath": "gcs"}})
    decision = World(obj, config=builders.config(gates=FeatureGates(gcs_fault_tolerance_embedded_storage=True))).step()
    assert "2.5/add-gcs-ft-finalizer" not in decision.rules
    pvc = by_name(decision, "PersistentVolumeClaim", "rc-gcs-pvc")
    assert pvc["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    head = next(p for p in created(decision, "Pod") if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    env = {e["name"]: e.get("value") for e in head["spec"]["containers"][0]["env"]}
    assert env["RAY_gcs_storage"] == "rocksdb" and env["RAY_gcs_storage_path"] == "/data/gcs"
    assert {"name": "gcs-storage", "persistentVolumeClaim": {"claimName": "rc-gcs-pvc"}} in head["spec"]["volumes"]
    assert {"mountPath": "/data/gcs", "name": "gcs-storage", "subPath": "gcs"} in head["spec"]["containers"][0][
        "volumeMounts"
    ]


def test_status_written_with_resource_version_after_children() -> None:
    world = World(builders.cluster())
    world.step()
    world.settle()
    decision = world.step(apply=False)
    (status,) = [c for c in decision.commands if isinstance(c, PatchStatus)]
    assert status.resource_version == world.cluster["metadata"]["resourceVersion"]
    assert status.status["head"]["serviceName"] == "rc-head-svc"
