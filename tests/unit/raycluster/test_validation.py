"""docs/behaviour.md#8: one case per RayClusterSpec/metadata rule; a failure is a Warning Event and nothing else."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from schema.config import FeatureGates
from schema.messages import EmitEvent
from services.reconciler.raycluster import reconcile
from services.reconciler.raycluster.validation import MESSAGES
from tests.unit.raycluster import builders
from tests.unit.raycluster.sim import NOW, World

Mutate = Callable[[dict[str, Any]], object]


def head(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["headGroupSpec"]
    return spec


def worker(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["workerGroupSpecs"][0]
    return spec


def head_env(obj: dict[str, Any], name: str, value: str = "x") -> dict[str, Any]:
    head(obj)["template"]["spec"]["containers"][0].setdefault("env", []).append({"name": name, "value": value})
    return obj


def autoscale(obj: dict[str, Any], version: str | None = None) -> dict[str, Any]:
    obj["spec"]["enableInTreeAutoscaling"] = True
    if version:
        obj["spec"]["autoscalerOptions"] = {"version": version}
    return obj


def _ft(obj: dict[str, Any], **options: Any) -> dict[str, Any]:
    obj["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379", **options}
    return obj


ON = FeatureGates(
    gcs_fault_tolerance_embedded_storage=True,
    ray_cluster_history_server=True,
    ray_cluster_network_policy=True,
    ray_cluster_mtls=True,
)

SPEC_CASES = [
    pytest.param(
        lambda o: head(o)["template"]["spec"].update(containers=[]), "head-no-container", None, id="head-no-container"
    ),
    pytest.param(
        lambda o: worker(o)["template"]["spec"].update(containers=[]),
        "worker-no-container",
        None,
        id="worker-no-container",
    ),
    pytest.param(lambda o: worker(o).pop("minReplicas"), "min-max-required", None, id="min-missing-no-autoscaling"),
    pytest.param(lambda o: worker(o).update(minReplicas=-1), "min-negative", None, id="min-negative"),
    pytest.param(lambda o: worker(o).update(maxReplicas=-1, minReplicas=0), "max-negative", None, id="max-negative"),
    pytest.param(lambda o: worker(o).update(minReplicas=5, maxReplicas=2), "min-gt-max", None, id="min-gt-max"),
    pytest.param(
        lambda o: worker(o).update(resources={"cpu": "1"}, rayStartParams={"num-cpus": "2"}),
        "resources-conflict",
        None,
        id="resources-with-num-cpus",
    ),
    pytest.param(lambda o: worker(o).update(rayStartParams={"labels": "a=b"}), "labels-param", None, id="labels-param"),
    pytest.param(lambda o: worker(o).update(labels={"-bad": "x"}), "label-key", None, id="label-key"),
    pytest.param(lambda o: worker(o).update(labels={"ok": "bad value!"}), "label-value", None, id="label-value"),
    pytest.param(lambda o: worker(o).update(idleTimeoutSeconds=-1), "idle-negative", None, id="idle-negative"),
    pytest.param(lambda o: worker(o).update(idleTimeoutSeconds=30), "idle-needs-v2", None, id="idle-without-v2"),
    pytest.param(lambda o: (autoscale(o, "v2"), worker(o).update(priority=3)), "priority", None, id="priority-old-ray"),
    pytest.param(
        lambda o: (_ft(o), o["metadata"].update(annotations={"ray.io/ft-enabled": "true"})),
        "ft-both",
        None,
        id="ft-both",
    ),
    pytest.param(lambda o: head_env(o, "RAY_REDIS_ADDRESS"), "redis-address-no-ft", None, id="redis-address-no-ft"),
    pytest.param(
        lambda o: (_ft(o), head(o).update(rayStartParams={"redis-password": "p"})),
        "ft-redis-password-param",
        None,
        id="ft-redis-password-param",
    ),
    pytest.param(
        lambda o: (_ft(o), head_env(o, "REDIS_PASSWORD")), "ft-redis-password-env", None, id="ft-redis-password-env"
    ),
    pytest.param(
        lambda o: (o["spec"].update(gcsFaultToleranceOptions={}), head_env(o, "RAY_REDIS_ADDRESS")),
        "ft-redis-address-env",
        None,
        id="ft-redis-address-env",
    ),
    pytest.param(
        lambda o: (_ft(o), o["metadata"].update(annotations={"ray.io/external-storage-namespace": "x"})),
        "ft-storage-ns-annotation",
        None,
        id="ft-storage-ns-annotation",
    ),
    pytest.param(
        lambda o: o["spec"].update(gcsFaultToleranceOptions={"backend": "rocksdb"}),
        "rocksdb-gate",
        None,
        id="rocksdb-gate",
    ),
    pytest.param(lambda o: _ft(o, backend="rocksdb"), "rocksdb-redis-fields", ON, id="rocksdb-redis-fields"),
    pytest.param(
        lambda o: o["spec"].update(
            gcsFaultToleranceOptions={"backend": "rocksdb", "storage": {"claimName": "c", "size": "2Gi"}}
        ),
        "rocksdb-claim",
        ON,
        id="rocksdb-claim-with-size",
    ),
    pytest.param(
        lambda o: (o["spec"].update(gcsFaultToleranceOptions={"backend": "rocksdb"}), head_env(o, "RAY_gcs_storage")),
        "rocksdb-env",
        ON,
        id="rocksdb-env",
    ),
    pytest.param(
        lambda o: (
            o["spec"].update(gcsFaultToleranceOptions={"backend": "rocksdb"}),
            head(o)["template"]["spec"].update(volumes=[{"name": "gcs-storage", "emptyDir": {}}]),
        ),
        "rocksdb-volume",
        ON,
        id="rocksdb-volume",
    ),
    pytest.param(lambda o: _ft(o, storage={"size": "1Gi"}), "redis-storage", None, id="redis-with-storage"),
    pytest.param(lambda o: head_env(o, "REDIS_USERNAME"), "redis-username", None, id="redis-username-env"),
    pytest.param(
        lambda o: worker(o).update(suspend=True),
        "group-suspend-gate",
        FeatureGates(ray_job_deletion_policy=False),
        id="group-suspend-without-gate",
    ),
    pytest.param(
        lambda o: head_env(o, "RAY_enable_autoscaler_v2", "true"),
        "v2-env-no-autoscaling",
        None,
        id="v2-env-no-autoscaling",
    ),
    pytest.param(
        lambda o: (autoscale(o), worker(o).update(suspend=True)),
        "autoscaling-group-suspend",
        None,
        id="autoscaling-group-suspend",
    ),
    pytest.param(
        lambda o: (autoscale(o, "v2"), head_env(o, "RAY_enable_autoscaler_v2", "1")), "v2-both", None, id="v2-both"
    ),
    pytest.param(
        lambda o: (autoscale(o, "v2"), head(o)["template"]["spec"].update(restartPolicy="Always")),
        "v2-restart-head",
        None,
        id="v2-restart-head",
    ),
    pytest.param(
        lambda o: (autoscale(o, "v2"), worker(o)["template"]["spec"].update(restartPolicy="OnFailure")),
        "v2-restart-worker",
        None,
        id="v2-restart-worker",
    ),
    pytest.param(
        lambda o: o["spec"].update(autoscalerOptions={"idleTimeoutSeconds": -5}),
        "autoscaler-idle-negative",
        None,
        id="autoscaler-idle-negative",
    ),
    pytest.param(
        lambda o: o["spec"].update(
            autoscalerOptions={"env": [{"name": "KUBERAY_GEN_AUTOSCALER_START_CMD", "value": "x"}]}
        ),
        "autoscaler-env",
        None,
        id="autoscaler-env",
    ),
    pytest.param(lambda o: o["spec"].update(historyServerOptions={}), "history-gate", None, id="history-gate"),
    pytest.param(lambda o: o["spec"].update(historyServerOptions={}), "history-collector", ON, id="history-collector"),
    pytest.param(
        lambda o: o["spec"].update(historyServerOptions={"collectorOptions": {}}),
        "history-image",
        ON,
        id="history-image",
    ),
    pytest.param(
        lambda o: o["spec"].update(
            historyServerOptions={"collectorOptions": {"image": "i", "env": [{"name": "POD_IP"}]}}
        ),
        "history-env",
        ON,
        id="history-env",
    ),
    pytest.param(
        lambda o: o["spec"].update(historyServerOptions={"collectorOptions": {"image": "i"}}),
        "history-backend",
        ON,
        id="history-backend",
    ),
    pytest.param(
        lambda o: o["spec"].update(authOptions={"mode": "token"}, rayVersion="2.51.0"),
        "auth-version",
        None,
        id="auth-old-ray",
    ),
    pytest.param(
        lambda o: o["spec"].update(authOptions={"mode": "token"}, rayVersion="latest"),
        "auth-version",
        None,
        id="auth-unparsable",
    ),
    pytest.param(
        lambda o: o["spec"].update(authOptions={"mode": "token", "enableK8sTokenAuth": True}, rayVersion="2.53.0"),
        "k8s-auth-version",
        None,
        id="k8s-auth-old-ray",
    ),
    pytest.param(
        lambda o: o["spec"].update(
            authOptions={"mode": "token", "enableK8sTokenAuth": True, "secretName": "s"}, rayVersion="2.55.0"
        ),
        "k8s-auth-secret",
        None,
        id="k8s-auth-with-secret",
    ),
    pytest.param(
        lambda o: o["spec"].update(authOptions={"mode": "disabled", "enableK8sTokenAuth": True}),
        "k8s-auth-mode",
        None,
        id="k8s-auth-without-token",
    ),
    pytest.param(lambda o: o["spec"].update(networkPolicy={}), "netpol-gate", None, id="netpol-gate"),
    pytest.param(
        lambda o: o["spec"].update(networkPolicy={"mode": "DenyAllEgress", "head": {"ingressRules": [{}]}}),
        "netpol-ingress",
        ON,
        id="netpol-ingress-under-deny-egress",
    ),
    pytest.param(
        lambda o: o["spec"].update(networkPolicy={"mode": "DenyAllIngress", "worker": {"egressRules": [{}]}}),
        "netpol-egress",
        ON,
        id="netpol-egress-under-deny-ingress",
    ),
    pytest.param(
        lambda o: o["spec"].update(networkPolicy={"workerGroups": [{"groupName": "Bad_Name"}]}),
        "netpol-group-name",
        ON,
        id="netpol-group-name",
    ),
    pytest.param(
        lambda o: o["spec"].update(networkPolicy={"workerGroups": [{"groupName": "other"}]}),
        "netpol-group-missing",
        ON,
        id="netpol-group-missing",
    ),
    pytest.param(lambda o: o["spec"].update(tlsOptions={"enabled": True}), "tls-gate", None, id="tls-gate"),
    pytest.param(
        lambda o: (o["spec"].update(tlsOptions={"enabled": True}), head_env(o, "RAY_USE_TLS", "1")),
        "tls-env",
        ON,
        id="tls-env",
    ),
]


def matches_message(key: str, message: str) -> bool:
    """``message`` is the MESSAGES[key] template with its placeholders filled."""
    parts = re.split(r"\{[^}]*\}", MESSAGES[key])
    return re.fullmatch(".+".join(re.escape(p) for p in parts), message) is not None


def run(mutate: Mutate, gates: FeatureGates | None) -> Any:
    obj = builders.cluster()
    mutate(obj)
    world = World(obj, config=builders.config(gates=gates or FeatureGates()))
    return reconcile(world.snapshot(), NOW, world.config)


@pytest.mark.parametrize(("mutate", "key", "gates"), SPEC_CASES)
def test_spec_rule(mutate: Mutate, key: str, gates: FeatureGates | None) -> None:
    decision = run(mutate, gates)
    assert len(decision.commands) == 1, decision.rules
    event = decision.commands[0]
    assert isinstance(event, EmitEvent)
    assert (event.event_type, event.reason) == ("Warning", "InvalidRayClusterSpec")
    assert matches_message(key, event.message), event.message
    assert decision.rules == ("4.1/validate-spec-failed",)
    assert decision.wake_at is None  # no requeue, no status, no children


@pytest.mark.parametrize(
    ("name", "key"),
    [
        pytest.param("a" * 54, "name-too-long", id="too-long"),
        pytest.param("Upper", "name-dns1035", id="uppercase"),
        pytest.param("1abc", "name-dns1035", id="leading-digit"),
        pytest.param("a.b", "name-dns1035", id="dot"),
    ],
)
def test_metadata_rule(name: str, key: str) -> None:
    obj = builders.cluster(name=name)
    world = World(obj)
    decision = reconcile(world.snapshot(), NOW, world.config)
    (event,) = decision.commands
    assert isinstance(event, EmitEvent)
    assert (event.event_type, event.reason) == ("Warning", "InvalidRayClusterMetadata")
    assert matches_message(key, event.message), event.message
    assert decision.wake_at is None


def test_longest_valid_name_passes() -> None:
    world = World(builders.cluster(name="a" * 53))
    decision = world.step()
    assert "4.2/create-head-pod" in decision.rules


def test_first_failure_wins() -> None:
    def both(o: dict[str, Any]) -> None:
        worker(o).update(minReplicas=-1)
        head_env(o, "REDIS_USERNAME")

    decision = run(both, None)
    assert isinstance(decision.commands[0], EmitEvent)
    assert matches_message("min-negative", decision.commands[0].message)


def test_min_max_may_be_missing_with_autoscaling() -> None:
    def mutate(o: dict[str, Any]) -> None:
        autoscale(o)
        worker(o).pop("minReplicas")

    decision = run(mutate, None)
    assert "4.2/create-head-pod" in decision.rules


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        pytest.param(lambda o: o["spec"].update(headGroupSpec=3), "headGroupSpec", id="head-not-object"),
        pytest.param(lambda o: o.pop("spec"), "spec", id="no-spec"),
        pytest.param(lambda o: worker(o).update(replicas="many"), "replicas", id="replicas-not-int"),
        pytest.param(
            lambda o: head(o)["template"]["spec"].update(containers=[{"name": 3}]), "name", id="container-name"
        ),
        pytest.param(
            lambda o: head(o)["template"]["spec"]["containers"][0].update(env=[{"value": "x"}]), "env", id="env-no-name"
        ),
        pytest.param(
            lambda o: worker(o)["template"]["spec"]["containers"][0].update(resources={"limits": {"cpu": "lots"}}),
            "quantities",
            id="bad-quantity",
        ),
        pytest.param(lambda o: head(o).update(headService=[1]), "headService", id="head-service-list"),
        pytest.param(
            lambda o: head(o)["template"]["spec"]["containers"][0].update(ports=[{"containerPort": "x"}]),
            "containerPort",
            id="port-not-int",
        ),
    ],
)
def test_malformed_spec_is_a_warning(mutate: Mutate, fragment: str) -> None:
    decision = run(mutate, None)
    (event,) = decision.commands
    assert isinstance(event, EmitEvent)
    assert event.reason == "InvalidRayClusterSpec"
    assert fragment in event.message
