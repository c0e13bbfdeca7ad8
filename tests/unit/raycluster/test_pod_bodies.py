"""docs/behaviour.md#3: pod construction details not covered by the golden files."""

from __future__ import annotations

from typing import Any

import pytest

from schema.config import OperatorConfig, OperatorSwitches, PodDefaults
from schema.ray import conventions
from services.reconciler.raycluster import model, names, pod_bodies, rayparams
from tests.unit.raycluster import builders


def view(obj: dict[str, Any]) -> model.ClusterView:
    return model.decode_view(obj)


def head_pod(obj: dict[str, Any], config: OperatorConfig | None = None) -> dict[str, Any]:
    return pod_bodies.head_pod(view(obj), config or OperatorConfig(), name="h", spec_hash="x")


def worker_pod(obj: dict[str, Any], config: OperatorConfig | None = None) -> dict[str, Any]:
    v = view(obj)
    assert v.spec.worker_group_specs
    return pod_bodies.worker_pod(v, v.spec.worker_group_specs[0], config or OperatorConfig(), name="w", extra_labels={})


def env_names(pod: dict[str, Any]) -> list[str]:
    return [e["name"] for e in pod["spec"]["containers"][0]["env"]]


# -- rayStartParams (§3.2) -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("params", "rendered"),
    [
        pytest.param({"block": "true"}, " --block ", id="true-is-bare"),
        pytest.param({"x": "False"}, "", id="false-dropped"),
        pytest.param({"log-color": "true"}, " --log-color=true ", id="log-color-valued"),
        pytest.param({"include-dashboard": "false"}, " --include-dashboard=false ", id="include-dashboard"),
        pytest.param({"b": "2", "a": "1"}, " --a=1  --b=2 ", id="sorted"),
    ],
)
def test_render_flags(params: dict[str, str], rendered: str) -> None:
    assert rayparams.render_flags(params) == rendered


def test_group_resources_and_labels_become_params() -> None:
    params = rayparams.complete_start_params(
        {"num-cpus": "8"},
        head=False,
        group_resources={"cpu": "1500m", "memory": "1Gi", "nvidia.com/gpu": "2", "custom": "2", "TPU": "0.5"},
        group_labels={"zone": "b", "accel": "a100"},
        head_address="svc:6379",
        autoscaling=False,
    )
    assert params["num-cpus"] == "2"
    assert params["memory"] == str(2**30)
    assert params["num-gpus"] == "2"
    assert params["resources"] == """'{"TPU":0.5,"custom":2}'"""
    assert params["labels"] == "accel=a100,zone=b"
    assert params["address"] == "svc:6379"


@pytest.mark.parametrize(
    ("limits", "requests", "expected"),
    [
        pytest.param({"cpu": "500m"}, {}, {"num-cpus": "1"}, id="cpu-rounded-up"),
        pytest.param({}, {"cpu": "2"}, {"num-cpus": "2"}, id="cpu-from-request"),
        pytest.param({}, {"memory": "1Gi"}, {}, id="memory-request-ignored"),
        pytest.param({"nvidia.com/mig-1g.5gb": "1"}, {}, {"num-gpus": "1"}, id="mig-is-gpu"),
        pytest.param({"google.com/tpu": "4"}, {}, {"resources": """'{"TPU":4}'"""}, id="tpu"),
        pytest.param(
            {"aws.amazon.com/neuroncore": "2", "google.com/tpu": "4"},
            {},
            {"resources": """'{"neuron_cores":2}'"""},
            id="first-accelerator-by-name",
        ),
    ],
)
def test_params_from_container_resources(
    limits: dict[str, str], requests: dict[str, str], expected: dict[str, str]
) -> None:
    out = rayparams.add_container_resources({}, {"limits": limits, "requests": requests})
    assert out == expected


def test_accelerator_not_added_when_resources_has_one() -> None:
    out = rayparams.add_container_resources({"resources": """'{"TPU": 8}'"""}, {"limits": {"google.com/tpu": "4"}})
    assert out["resources"] == """'{"TPU": 8}'"""
    merged = rayparams.add_container_resources({"resources": """'{"x": 1}'"""}, {"limits": {"google.com/tpu": "4"}})
    assert merged["resources"] == """'{"TPU":4,"x":1}'"""


def test_gpu_precedence_param_over_limit() -> None:
    obj = builders.cluster()
    group = obj["spec"]["workerGroupSpecs"][0]
    group["rayStartParams"] = {"num-gpus": "3"}
    group["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    assert "--num-gpus=3" in worker_pod(obj)["spec"]["containers"][0]["args"][0]


# -- env (§3.4) -------------------------------------------------------------------------------------------
def test_env_order_rayservice_worker_with_ft_and_auth() -> None:
    obj = builders.cluster(
        labels={"ray.io/originated-from-crd": "RayService"},
        gcsFaultToleranceOptions={"redisAddress": "r:6379"},
        authOptions={"mode": "token"},
    )
    worker = obj["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    worker["env"] = [{"name": "USER", "value": "1"}, {"name": "RAY_ADDRESS", "value": "mine"}]
    config = OperatorConfig(pod_defaults=PodDefaults(default_container_envs=({"name": "DEF", "value": "d"},)))
    pod = worker_pod(obj, config)
    assert env_names(pod) == [
        "USER",
        "RAY_ADDRESS",
        "DEF",
        "FQ_RAY_IP",
        "RAY_IP",
        "RAY_CLUSTER_NAME",
        "RAY_CLUSTER_NAMESPACE",
        "RAY_CLOUD_INSTANCE_ID",
        "RAY_NODE_TYPE_NAME",
        "KUBERAY_GEN_RAY_START_CMD",
        "RAY_PORT",
        "RAY_timeout_ms_task_wait_for_death_info",
        "RAY_gcs_server_request_timeout_seconds",
        "RAY_SERVE_KV_TIMEOUT_S",
        "RAY_USAGE_STATS_KUBERAY_IN_USE",
        "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE",
        "RAY_gcs_rpc_server_reconnect_timeout_s",
        "RAY_AUTH_MODE",
        "RAY_AUTH_TOKEN",
    ]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["RAY_ADDRESS"] == "mine"  # user value wins
    assert pod["metadata"]["labels"]["ray.io/serve"] == "true"
    readiness = pod["spec"]["containers"][0]["readinessProbe"]
    assert readiness["failureThreshold"] == 1
    assert "http://localhost:8000/-/healthz" in readiness["exec"]["command"][2]
    init = pod["spec"]["initContainers"][0]
    assert [e["name"] for e in init["env"]] == ["USER", "RAY_ADDRESS", "FQ_RAY_IP", "RAY_IP"]


def test_head_extra_tags_and_creator() -> None:
    pod = head_pod(builders.cluster(labels={"ray.io/originated-from-crd": "RayJob"}))
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["RAY_USAGE_STATS_EXTRA_TAGS"] == "kuberay_version=raybus-0.1.0;kuberay_crd=RayJob"


# -- command (§3.3) ---------------------------------------------------------------------------------------
def test_login_shell_switch() -> None:
    pod = head_pod(builders.cluster(), OperatorConfig(switches=OperatorSwitches(enable_login_shell=True)))
    assert pod["spec"]["containers"][0]["command"] == ["/bin/bash", "-cl", "--"]


def test_user_command_containing_ray_start_is_kept() -> None:
    obj = builders.cluster()
    container = obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    container["command"] = ["/bin/bash", "-c", "ray start --head --block"]
    pod = head_pod(obj)
    assert pod["spec"]["containers"][0]["command"] == ["/bin/bash", "-c", "ray start --head --block"]
    assert "args" not in pod["spec"]["containers"][0]
    # tokens are padded before the search (KubeRay quirk): ["ray", "start"] does not contain "ray start"
    container["command"] = ["ray", "start"]
    args = head_pod(obj)["spec"]["containers"][0]["args"][0]
    assert args.startswith(" ray  start  && ulimit -n")


# -- probes (§3.7) ----------------------------------------------------------------------------------------
def test_http_probes_from_ray_253() -> None:
    pod = head_pod(builders.cluster(rayVersion="2.53.0"))
    probe = pod["spec"]["containers"][0]["livenessProbe"]
    assert probe["httpGet"] == {"path": "/api/healthz", "port": 52365}
    assert (probe["initialDelaySeconds"], probe["timeoutSeconds"], probe["failureThreshold"]) == (30, 5, 120)


def test_user_probe_kept_and_injection_switch() -> None:
    obj = builders.cluster()
    container = obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    container["readinessProbe"] = {"tcpSocket": {"port": 6379}}
    pod = head_pod(obj)
    assert pod["spec"]["containers"][0]["readinessProbe"] == {"tcpSocket": {"port": 6379}}
    assert "livenessProbe" in pod["spec"]["containers"][0]
    pod = head_pod(builders.cluster(), OperatorConfig(switches=OperatorSwitches(enable_probes_injection=False)))
    assert "livenessProbe" not in pod["spec"]["containers"][0]


# -- volumes (§3.6) ---------------------------------------------------------------------------------------
def test_shared_memory_skipped() -> None:
    obj = builders.cluster()
    obj["spec"]["headGroupSpec"]["rayStartParams"] = {"plasma-directory": "/tmp"}
    assert "volumes" not in head_pod(obj)["spec"]
    obj = builders.cluster()
    container = obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    container["volumeMounts"] = [{"name": "mine", "mountPath": "/dev/shm"}]
    obj["spec"]["headGroupSpec"]["template"]["spec"]["volumes"] = [{"name": "mine", "emptyDir": {}}]
    pod = head_pod(obj)
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["mine"]


def test_shm_size_from_request_without_limit() -> None:
    obj = builders.cluster()
    obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"memory": "3Gi"}}
    assert head_pod(obj)["spec"]["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "3Gi"}


# -- labels, annotations, names, operator defaults --------------------------------------------------------
def test_labels_precedence() -> None:
    obj = builders.cluster()
    head = obj["spec"]["headGroupSpec"]
    head["template"]["metadata"] = {"labels": {"ray.io/cluster": "evil", "ray.io/is-ray-node": "no", "t": "template"}}
    head["labels"] = {"t": "group", "ray.io/group": "evil"}
    config = OperatorConfig(
        pod_defaults=PodDefaults(default_pod_labels={"t": "default", "d": "1"}, default_pod_annotations={"a": "1"})
    )
    pod = head_pod(obj, config)
    labels = pod["metadata"]["labels"]
    assert labels["ray.io/cluster"] == "rc" and labels["ray.io/group"] == "headgroup"
    assert labels["ray.io/is-ray-node"] == "no" and labels["t"] == "group" and labels["d"] == "1"
    assert pod["metadata"]["annotations"]["a"] == "1"
    assert "--labels=ray.io/group=evil,t=group" in pod["spec"]["containers"][0]["args"][0]


def test_operator_sidecars_and_init_switch() -> None:
    sidecar = {"name": "log", "image": "fluent"}
    config = OperatorConfig(
        switches=OperatorSwitches(enable_init_container_injection=False),
        pod_defaults=PodDefaults(head_sidecar_containers=(sidecar,), worker_sidecar_containers=(sidecar,)),
    )
    obj = builders.cluster()
    assert [c["name"] for c in head_pod(obj, config)["spec"]["containers"]] == ["ray-head", "log"]
    worker = worker_pod(obj, config)
    assert [c["name"] for c in worker["spec"]["containers"]] == ["ray-worker", "log"]
    assert "initContainers" not in worker["spec"]


def test_autoscaler_options_override() -> None:
    obj = builders.cluster(
        enableInTreeAutoscaling=True,
        autoscalerOptions={
            "image": "custom",
            "imagePullPolicy": "Always",
            "resources": {"limits": {"cpu": "1"}},
            "env": [{"name": "E", "value": "1"}],
            "envFrom": [{"configMapRef": {"name": "cm"}}],
            "volumeMounts": [{"name": "v", "mountPath": "/v"}],
            "command": ["sh"],
            "args": ["-c", "x"],
            "version": "v1",
        },
    )
    pod = head_pod(obj)
    autoscaler = pod["spec"]["containers"][1]
    assert autoscaler["image"] == "custom" and autoscaler["imagePullPolicy"] == "Always"
    assert autoscaler["resources"] == {"limits": {"cpu": "1"}}
    assert autoscaler["command"] == ["sh"] and autoscaler["args"] == ["-c", "x"]
    assert autoscaler["env"][-1] == {"name": "E", "value": "1"} and len(autoscaler["env"]) == 6
    assert autoscaler["envFrom"] == [{"configMapRef": {"name": "cm"}}]
    assert [m["mountPath"] for m in autoscaler["volumeMounts"]] == ["/v", "/tmp/ray"]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["RAY_enable_autoscaler_v2"] == "false"
    assert "restartPolicy" not in pod["spec"]


def test_names() -> None:
    assert conventions.check_name("x" * 60) == "x" * 50
    assert conventions.check_name("1abc") == "rabc"
    assert conventions.check_label("-" + "a" * 70) == "a" * 63
    assert conventions.check_label("-abc") == "rabc"
    assert names.head_pod_name("My-Cluster", "u", deterministic=True) == "my-cluster-head"
    name = names.head_pod_name("c" * 60, "u", deterministic=False)
    assert name.startswith("c" * 50 + "-head-") and len(name) == 61
    assert names.worker_pod_name("c", "u", "G", 0) != names.worker_pod_name("c", "u", "G", 1)
    assert names.worker_pod_name("c", "u", "G", 0).startswith("c-g-worker-")


def test_deterministic_head_name_switch() -> None:
    from tests.unit.raycluster.sim import World

    world = World(
        builders.cluster(), config=OperatorConfig(switches=OperatorSwitches(enable_deterministic_head_pod_name=True))
    )
    world.step()
    assert ("Pod", "rc-head") in world.objects
