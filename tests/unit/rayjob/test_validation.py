"""RayJob rules of docs/behaviour.md#8: each one with KubeRay's message, the Event reason and the
ValidationFailed status."""

from __future__ import annotations

from typing import Any

import pytest

from schema.config import OperatorConfig
from schema.messages import EmitEvent, PatchStatus
from schema.ray.rayjob import RayJobSpec
from services.reconciler.rayjob import reconcile, validate_rayjob_spec
from tests.unit.rayjob.builders import cluster_spec, rayjob
from tests.unit.rayjob.sim import World

INVALID = "The RayJob spec is invalid: "
SELECTOR = {"ray.io/cluster": "shared"}


def _autoscaling() -> dict[str, Any]:
    spec = cluster_spec()
    spec["enableInTreeAutoscaling"] = True
    return spec


def _sidecar_restart_always() -> dict[str, Any]:
    spec = cluster_spec()
    spec["headGroupSpec"]["template"]["spec"]["restartPolicy"] = "Always"
    return spec


def _k8s_auth() -> dict[str, Any]:
    spec = cluster_spec()
    spec["authOptions"] = {"mode": "token", "enableK8sTokenAuth": True}
    return spec


def _no_head_containers() -> dict[str, Any]:
    spec = cluster_spec()
    spec["headGroupSpec"]["template"]["spec"]["containers"] = []
    return spec


def _rules(*rules: tuple[str, str, int]) -> dict[str, Any]:
    return {
        "deletionRules": [
            {"condition": {"jobStatus": status, "ttlSeconds": ttl}, "policy": policy} for status, policy, ttl in rules
        ]
    }


SPEC_CASES = [
    pytest.param(
        {"suspend": True},
        INVALID + "a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended",
        id="suspend-without-shutdown",
    ),
    pytest.param(
        {"ttlSecondsAfterFinished": -1, "shutdownAfterJobFinishes": True},
        INVALID + "TTLSecondsAfterFinished must be a non-negative integer",
        id="negative-ttl",
    ),
    pytest.param(
        {"ttlSecondsAfterFinished": 10},
        INVALID + "a RayJob with shutdownAfterJobFinishes set to false cannot have TTLSecondsAfterFinished",
        id="ttl-without-shutdown",
    ),
    pytest.param(
        {"shutdownAfterJobFinishes": True, "deletionStrategy": _rules(("FAILED", "DeleteCluster", 0))},
        INVALID + "spec.shutdownAfterJobFinishes and spec.deletionStrategy.deletionRules are mutually exclusive",
        id="rules-with-shutdown",
    ),
    pytest.param(
        {"deletionStrategy": {**_rules(("FAILED", "DeleteCluster", 0)), "onSuccess": {"policy": "DeleteCluster"}}},
        INVALID + "Cannot use both legacy onSuccess/onFailure fields and deletionRules simultaneously",
        id="rules-with-legacy",
    ),
    pytest.param(
        {"deletionStrategy": {"onSuccess": {"policy": "DeleteCluster"}}},
        "both DeletionStrategy.OnSuccess and DeletionStrategy.OnFailure must be set when using the legacy "
        "deletion policy fields of DeletionStrategy",
        id="legacy-needs-both",
    ),
    pytest.param(
        {"deletionStrategy": {"onSuccess": {}, "onFailure": {"policy": "DeleteCluster"}}},
        "the DeletionPolicyType field of DeletionStrategy.OnSuccess cannot be unset when DeletionStrategy is enabled",
        id="legacy-on-success-policy-unset",
    ),
    pytest.param(
        {"deletionStrategy": {"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {}}},
        "the DeletionPolicyType field of DeletionStrategy.OnFailure cannot be unset when DeletionStrategy is enabled",
        id="legacy-on-failure-policy-unset",
    ),
    pytest.param(
        {
            "shutdownAfterJobFinishes": True,
            "deletionStrategy": {"onSuccess": {"policy": "DeleteNone"}, "onFailure": {"policy": "DeleteCluster"}},
        },
        INVALID + "shutdownAfterJobFinshes is set to 'true' while deletion policy is 'DeleteNone'",
        id="legacy-delete-none-with-shutdown",
    ),
    pytest.param(
        {
            "clusterSelector": SELECTOR,
            "rayClusterSpec": None,
            "deletionStrategy": {"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteNone"}},
        },
        "the ClusterSelector mode doesn't support DeletionStrategy=DeleteCluster on success",
        id="legacy-delete-cluster-with-selector",
    ),
    pytest.param(
        {
            "rayClusterSpec": _autoscaling(),
            "deletionStrategy": {"onSuccess": {"policy": "DeleteWorkers"}, "onFailure": {"policy": "DeleteNone"}},
        },
        "DeletionStrategy=DeleteWorkers currently does not support RayCluster with autoscaling enabled",
        id="legacy-delete-workers-with-autoscaling",
    ),
    pytest.param(
        {"deletionStrategy": {}},
        INVALID + "DeletionStrategy requires either BOTH onSuccess and onFailure, OR the deletionRules field "
        "(cannot be empty)",
        id="empty-strategy",
    ),
    pytest.param(
        {
            "clusterSelector": SELECTOR,
            "rayClusterSpec": None,
            "deletionStrategy": _rules(("FAILED", "DeleteWorkers", 0)),
        },
        "deletionRules[0]: DeletionPolicyType 'DeleteWorkers' not supported when ClusterSelector is set",
        id="rule-delete-workers-with-selector",
    ),
    pytest.param(
        {"rayClusterSpec": _autoscaling(), "deletionStrategy": _rules(("FAILED", "DeleteWorkers", 0))},
        "deletionRules[0]: DeletionPolicyType 'DeleteWorkers' not supported with autoscaling enabled",
        id="rule-delete-workers-with-autoscaling",
    ),
    pytest.param(
        {"deletionStrategy": _rules(("FAILED", "DeleteCluster", 5), ("FAILED", "DeleteCluster", 9))},
        "deletionRules[1]: duplicate rule for DeletionPolicyType 'DeleteCluster' and JobStatus 'FAILED'",
        id="rule-duplicate",
    ),
    pytest.param(
        {"deletionStrategy": _rules(("FAILED", "DeleteCluster", 60), ("FAILED", "DeleteWorkers", 90))},
        "for JobStatus 'FAILED': DeleteCluster TTL (60) must be >= DeleteWorkers TTL (90)",
        id="rule-ttl-order",
    ),
    pytest.param(
        {"deletionStrategy": {"deletionRules": [{"condition": {"ttlSeconds": 5}, "policy": "DeleteCluster"}]}},
        "deletionRules[0]: exactly one of JobStatus and JobDeploymentStatus must be set",
        id="rule-no-condition",
    ),
    pytest.param(
        {
            "deletionStrategy": {
                "deletionRules": [
                    {"condition": {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed"}, "policy": "DeleteCluster"}
                ]
            }
        },
        "deletionRules[0]: cannot set both JobStatus and JobDeploymentStatus at the same time",
        id="rule-two-conditions",
    ),
    pytest.param(
        {"clusterSelector": SELECTOR, "rayClusterSpec": None, "suspend": True, "shutdownAfterJobFinishes": True},
        INVALID + "the ClusterSelector mode doesn't support the suspend operation",
        id="suspend-with-selector",
    ),
    pytest.param(
        {"rayClusterSpec": None}, INVALID + "one of RayClusterSpec or ClusterSelector must be set", id="no-cluster"
    ),
    pytest.param(
        {"clusterSelector": {"other": "x"}, "rayClusterSpec": None},
        "cluster name in ClusterSelector should not be empty",
        id="selector-without-cluster-name",
    ),
    pytest.param(
        {"clusterSelector": SELECTOR, "submissionMode": "SidecarMode"},
        "ClusterSelector is not supported in SidecarMode",
        id="selector-with-sidecar",
    ),
    pytest.param(
        {"clusterSelector": SELECTOR, "rayClusterSpec": None, "backoffLimit": 1},
        INVALID + "BackoffLimit is incompatible with ClusterSelector mode",
        id="selector-with-backoff",
    ),
    pytest.param(
        {"submissionMode": "InteractiveMode", "backoffLimit": 1},
        INVALID + "BackoffLimit is incompatible with InteractiveMode",
        id="interactive-with-backoff",
    ),
    pytest.param(
        {"submissionMode": "SidecarMode", "submitterPodTemplate": {"spec": {"containers": []}}},
        "Currently, SidecarMode doesn't support SubmitterPodTemplate",
        id="sidecar-with-template",
    ),
    pytest.param(
        {"submissionMode": "SidecarMode", "submitterConfig": {"backoffLimit": 1}},
        "Currently, SidecarMode doesn't support SubmitterConfig",
        id="sidecar-with-config",
    ),
    pytest.param(
        {"submissionMode": "SidecarMode", "rayClusterSpec": _sidecar_restart_always()},
        "restartPolicy for head Pod should be Never or unset when using SidecarMode",
        id="sidecar-head-restart-policy",
    ),
    pytest.param(
        {"rayClusterSpec": _k8s_auth()},
        INVALID + "K8s token auth mode is currently not supported for RayJob",
        id="k8s-token-auth",
    ),
    pytest.param(
        {"rayClusterSpec": _no_head_containers()},
        INVALID + "headGroupSpec should have at least one container",
        id="cluster-spec-invalid",
    ),
    pytest.param(
        {"runtimeEnvYAML": "- a\n- b\n"},
        "failed to unmarshal RuntimeEnvYAML: - a\n- b\n: cannot unmarshal list into map[string]interface {}",
        id="runtime-env-not-a-map",
    ),
    pytest.param(
        {"activeDeadlineSeconds": 0},
        INVALID + "activeDeadlineSeconds must be a positive integer",
        id="active-deadline-zero",
    ),
    pytest.param({"backoffLimit": -1}, INVALID + "backoffLimit must be a positive integer", id="negative-backoff"),
    pytest.param(
        {"submissionMode": "BatchMode"},
        INVALID + "submissionMode 'BatchMode' is not one of K8sJobMode, HTTPMode, InteractiveMode, SidecarMode",
        id="unknown-submission-mode",
    ),
]


@pytest.mark.parametrize(("spec", "message"), SPEC_CASES)
def test_spec_rule_fails_validation(spec: dict[str, Any], message: str) -> None:
    world = World()
    world.add(rayjob(finalizer=False, **spec))
    decision = world.reconcile(reconcile, "RayJob", "rj")
    event, patch = decision.commands
    assert isinstance(event, EmitEvent) and isinstance(patch, PatchStatus)
    assert (event.event_type, event.reason, event.message) == ("Warning", "InvalidRayJobSpec", f"default/rj: {message}")
    assert patch.status["jobDeploymentStatus"] == "ValidationFailed"
    assert patch.status["reason"] == "ValidationFailed"
    assert patch.status["message"] == message
    assert [(t.from_value, t.to_value, t.reason) for t in patch.transitions] == [
        ("", "ValidationFailed", "ValidationFailed")
    ]
    assert decision.wake_at is None
    # The status write is an event too: the next pass changes nothing and repeats no Event.
    again = world.reconcile(reconcile, "RayJob", "rj")
    assert again.commands == ()


def test_runtime_env_yaml_syntax_error() -> None:
    world = World()
    world.add(rayjob(runtimeEnvYAML="pip: [unclosed"))
    world.reconcile(reconcile, "RayJob", "rj")
    message = world.existing("RayJob", "rj")["status"]["message"]
    assert message.startswith("failed to unmarshal RuntimeEnvYAML: pip: [unclosed: ")


def test_pre_running_deadline_must_be_positive() -> None:
    # The CRD enforces the minimum (decode rejects 0); the validator still checks a struct built directly.
    spec = RayJobSpec(pre_running_deadline_seconds=0, cluster_selector=SELECTOR)
    assert validate_rayjob_spec(spec, raw_spec={}, annotations={}, config=OperatorConfig()) == (
        INVALID + "preRunningDeadlineSeconds must be a positive integer"
    )


def test_undecodable_spec_is_reported() -> None:
    world = World()
    world.add(rayjob(backoffLimit="many"))
    decision = world.reconcile(reconcile, "RayJob", "rj")
    event = decision.commands[0]
    assert isinstance(event, EmitEvent) and event.reason == "InvalidRayJobSpec"
    assert event.message.startswith("default/rj: The RayJob spec is invalid: Expected `int`")
    assert "$.backoffLimit" in event.message


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param(
            "a" * 48,
            "The RayJob metadata is invalid: RayJob name should be no more than 47 characters",
            id="too-long",
        ),
        pytest.param(
            "1job",
            "The RayJob metadata is invalid: RayJob name should be a valid DNS1035 label: [a DNS-1035 label must "
            "consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with "
            "an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
            "'[a-z]([-a-z0-9]*[a-z0-9])?')]",
            id="not-dns1035",
        ),
    ],
)
def test_metadata_rules(name: str, message: str) -> None:
    world = World()
    world.add(rayjob(name))
    decision = world.reconcile(reconcile, "RayJob", name)
    event = decision.commands[0]
    assert isinstance(event, EmitEvent)
    assert (event.reason, event.message) == ("InvalidRayJobMetadata", f"default/{name}: {message}")


def test_status_rule_waiting_outside_interactive_mode() -> None:
    world = World()
    world.add(rayjob(status={"jobDeploymentStatus": "Waiting"}))
    decision = world.reconcile(reconcile, "RayJob", "rj")
    event = decision.commands[0]
    assert isinstance(event, EmitEvent) and event.reason == "InvalidRayJobStatus"
    assert event.message == (
        "default/rj: The RayJob status is invalid: JobDeploymentStatus cannot be `Waiting` when SubmissionMode "
        "is not InteractiveMode"
    )


def test_validation_failed_is_a_dead_end() -> None:
    world = World()
    world.add(rayjob(backoffLimit=-1))
    world.reconcile(reconcile, "RayJob", "rj")
    world.update("RayJob", "rj", lambda o: o["spec"].update(backoffLimit=0))
    decision = world.reconcile(reconcile, "RayJob", "rj")
    assert decision.commands == () and decision.wake_at is None


def test_deletion_policy_gate_is_read_from_config() -> None:
    spec = RayJobSpec(cluster_selector=SELECTOR)
    assert validate_rayjob_spec(spec, raw_spec={}, annotations={}, config=OperatorConfig()) is None


def test_negative_rule_ttl_built_directly() -> None:
    # The CRD's minimum 0 stops it at admission (decode rejects it too); the validator still reports it.
    from schema.ray.rayjob import DeletionCondition, DeletionRule, DeletionStrategy

    rule = DeletionRule(policy="DeleteCluster", condition=DeletionCondition(job_status="FAILED", ttl_seconds=-1))
    spec = RayJobSpec(
        cluster_selector=None, ray_cluster_spec=None, deletion_strategy=DeletionStrategy(deletion_rules=(rule,))
    )
    raw = {"clusterSelector": SELECTOR}
    spec = RayJobSpec(cluster_selector=SELECTOR, deletion_strategy=spec.deletion_strategy)
    message = validate_rayjob_spec(spec, raw_spec=raw, annotations={}, config=OperatorConfig())
    assert message == "deletionRules[0]: TTLSeconds must be non-negative"
