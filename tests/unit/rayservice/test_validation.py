"""RayService validation (docs/behaviour.md#8): every rule → Warning Event + ``Ready=False/ValidationFailed``."""

from __future__ import annotations

from typing import Any

import pytest

from schema.config import FeatureGates, OperatorConfig
from schema.messages import CreateObject, EmitEvent, PatchStatus
from services.reconciler.rayservice import validate
from services.reconciler.rayservice.model import read_model
from tests.unit.rayservice.builders import cluster_config, incremental_strategy, rayservice
from tests.unit.rayservice.sim import World


def _options(**overrides: Any) -> dict[str, Any]:
    strategy = incremental_strategy()
    strategy["clusterUpgradeOptions"].update(overrides)
    for key in [k for k, v in strategy["clusterUpgradeOptions"].items() if v is None]:
        del strategy["clusterUpgradeOptions"][key]
    return strategy


def _autoscaling() -> dict[str, Any]:
    return cluster_config(autoscaling=True)


def _head_without_containers() -> dict[str, Any]:
    spec = cluster_config()
    spec["headGroupSpec"]["template"]["spec"]["containers"] = []
    return spec


def _min_above_max() -> dict[str, Any]:
    spec = cluster_config()
    spec["workerGroupSpecs"][0].update(minReplicas=6, maxReplicas=5)
    return spec


def _named_head_service() -> dict[str, Any]:
    spec = cluster_config()
    spec["headGroupSpec"]["headService"] = {"metadata": {"name": "my-head"}}
    return spec


def _k8s_token_auth() -> dict[str, Any]:
    spec = cluster_config()
    spec["rayVersion"] = "2.55.0"
    spec["authOptions"] = {"mode": "token", "enableK8sTokenAuth": True}
    return spec


CASES = [
    pytest.param(
        {"name": "r" * 48},
        "InvalidRayServiceMetadata",
        "The RayService metadata is invalid: RayService name should be no more than 47 characters",
        id="name-too-long",
    ),
    pytest.param(
        {"name": "1rs"},
        "InvalidRayServiceMetadata",
        "The RayService metadata is invalid: RayService name should be a valid DNS1035 label: [a DNS-1035 label",
        id="name-not-dns1035",
    ),
    pytest.param(
        {"annotations": {"ray.io/initializing-timeout": "-5m"}},
        "InvalidRayServiceMetadata",
        "RayService annotations is invalid: annotation ray.io/initializing-timeout must be a positive duration, "
        "got: -5m",
        id="timeout-negative-duration",
    ),
    pytest.param(
        {"annotations": {"ray.io/initializing-timeout": "0"}},
        "InvalidRayServiceMetadata",
        "annotation ray.io/initializing-timeout must be a positive duration, got: 0",
        id="timeout-zero",
    ),
    pytest.param(
        {"annotations": {"ray.io/initializing-timeout": "-30"}},
        "InvalidRayServiceMetadata",
        "annotation ray.io/initializing-timeout must be a positive integer (seconds), got: -30",
        id="timeout-negative-seconds",
    ),
    pytest.param(
        {"annotations": {"ray.io/initializing-timeout": "soon"}},
        "InvalidRayServiceMetadata",
        "annotation ray.io/initializing-timeout has invalid format: soon. Expected Go duration format "
        "(e.g., '5m', '1h') or positive integer seconds",
        id="timeout-garbage",
    ),
    pytest.param(
        {"rayClusterConfig": _k8s_token_auth()},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: K8s token auth mode is currently not supported for RayService",
        id="k8s-token-auth",
    ),
    pytest.param(
        {"rayClusterConfig": _head_without_containers()},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: ",
        id="cluster-spec-head-without-containers",
    ),
    pytest.param(
        {"rayClusterConfig": _min_above_max()},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: ",
        id="cluster-spec-min-above-max",
    ),
    pytest.param(
        {"rayClusterConfig": _named_head_service()},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: spec.rayClusterConfig.headGroupSpec.headService.metadata.name should not "
        "be set",
        id="head-service-name",
    ),
    pytest.param(
        {"upgradeStrategy": {"type": "Recreate"}},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: Spec.UpgradeStrategy.Type value Recreate is invalid, valid options are "
        "NewClusterWithIncrementalUpgrade, NewCluster, or None",
        id="upgrade-type",
    ),
    pytest.param(
        {"rayClusterDeletionDelaySeconds": -1},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: Spec.RayClusterDeletionDelaySeconds should be a non-negative integer, got -1",
        id="deletion-delay-negative",
    ),
    pytest.param(
        {"upgradeStrategy": incremental_strategy()},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: Ray Autoscaler is required for NewClusterWithIncrementalUpgrade",
        id="incremental-needs-autoscaling",
    ),
    pytest.param(
        {"rayClusterConfig": _autoscaling(), "upgradeStrategy": {"type": "NewClusterWithIncrementalUpgrade"}},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: ClusterUpgradeOptions are required for NewClusterWithIncrementalUpgrade",
        id="incremental-needs-options",
    ),
    pytest.param(
        {"rayClusterConfig": _autoscaling(), "upgradeStrategy": _options(maxSurgePercent=101)},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: maxSurgePercent must be between 0 and 100",
        id="max-surge-range",
    ),
    pytest.param(
        {"rayClusterConfig": _autoscaling(), "upgradeStrategy": _options(stepSizePercent=None)},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: stepSizePercent must be between 0 and 100",
        id="step-missing",
    ),
    pytest.param(
        {"rayClusterConfig": _autoscaling(), "upgradeStrategy": _options(stepSizePercent=-5)},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: stepSizePercent must be between 0 and 100",
        id="step-range",
    ),
    pytest.param(
        {"rayClusterConfig": _autoscaling(), "upgradeStrategy": _options(stepSizePercent=20, maxSurgePercent=10)},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: stepSizePercent must be less than or equal to maxSurgePercent",
        id="step-above-surge",
    ),
    pytest.param(
        {"rayClusterConfig": _autoscaling(), "upgradeStrategy": _options(intervalSeconds=0)},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: intervalSeconds must be greater than 0",
        id="interval-positive",
    ),
    pytest.param(
        {"rayClusterConfig": _autoscaling(), "upgradeStrategy": _options(gatewayClassName="")},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: gatewayClassName is required for NewClusterWithIncrementalUpgrade",
        id="gateway-class",
    ),
    pytest.param(
        {"rayClusterConfig": None},
        "InvalidRayServiceSpec",
        "The RayService spec is invalid: Object missing required field `rayClusterConfig`",
        id="spec-undecodable",
    ),
]


def _build(case: dict[str, Any]) -> dict[str, Any]:
    case = dict(case)
    name = case.pop("name", "rs")
    annotations = case.pop("annotations", None)
    return rayservice(name, annotations=annotations, **case)


@pytest.mark.parametrize(("case", "reason", "message"), CASES)
def test_each_rule_is_an_event_and_validation_failed(case: dict[str, Any], reason: str, message: str) -> None:
    world = World()
    obj = _build(case)
    name = obj["metadata"]["name"]
    world.add(obj)
    decision = world.reconcile(name)
    assert decision.rules[-2:] == ("8/rayservice-invalid", "6/status-write")
    events = [c for c in decision.commands if isinstance(c, EmitEvent)]
    assert len(events) == 1 and events[0].event_type == "Warning" and events[0].reason == reason
    assert message in events[0].message and events[0].message.startswith(f"default/{name}: ")
    ready = world.condition(name, "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "ValidationFailed")
    assert message in ready["message"]
    assert not any(isinstance(c, CreateObject) for c in decision.commands)
    assert decision.wake_at is None
    # No requeue: the same invalid object again writes nothing and repeats no Event.
    again = world.reconcile(name)
    assert not any(isinstance(c, EmitEvent | PatchStatus) for c in again.commands)


def test_fixing_the_spec_resumes_reconciling() -> None:
    world = World()
    world.add(rayservice(upgradeStrategy={"type": "Recreate"}))
    world.reconcile("rs")
    world.update("RayService", "rs", lambda o: o["spec"].pop("upgradeStrategy"), spec=True)
    world.settle("rs")
    assert world.status("rs")["serviceStatus"] == "Running"


@pytest.mark.parametrize(
    "timeout",
    [pytest.param("30m", id="minutes"), pytest.param("1h30m", id="compound"), pytest.param("600", id="seconds")],
)
def test_valid_initializing_timeouts(timeout: str) -> None:
    model = read_model(rayservice(annotations={"ray.io/initializing-timeout": timeout}))
    assert validate(model, OperatorConfig()) is None


def test_incremental_options_are_not_checked_with_the_gate_off() -> None:
    config = OperatorConfig(gates=FeatureGates(ray_service_incremental_upgrade=False))
    model = read_model(rayservice(upgradeStrategy=incremental_strategy()))
    assert validate(model, config) is None
