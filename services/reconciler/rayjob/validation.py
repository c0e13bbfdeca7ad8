"""RayJob validation (docs/behaviour.md#8): metadata, spec and status, first failure wins, KubeRay's messages.

Role: ``validate_rayjob`` answers "is this RayJob acceptable, and if not, which Event reason and which
message?" for the reconcile pass; ``validate_rayjob_spec`` is reused for a RayCronJob's jobTemplate.

Invariants: pure and total: every function returns an error string or None and never raises, whatever
the input (a value the typed view cannot hold is reported like any other spec error). Messages are
KubeRay's, verbatim where KubeRay defines them; the embedded cluster spec is checked by the RayCluster
controller's own validator, never a copy of it.

Not here: the CRD-level rules the API server enforces (enums, minimums, CEL), which a decode error
reports when an object bypassed them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import msgspec
import yaml

from schema.config import FeatureGates, OperatorConfig
from schema.ray import conventions
from schema.ray.raycluster import RayClusterSpec
from schema.ray.rayjob import (
    HTTP_MODE,
    INTERACTIVE_MODE,
    JOB_DEPLOYMENT_WAITING,
    K8S_JOB_MODE,
    SIDECAR_MODE,
    SUBMISSION_MODES,
    DeletionRule,
    RayJobSpec,
)
from services.reconciler.common.validation import dns1035_errors
from services.reconciler.raycluster.model import autoscaling_enabled, view_of
from services.reconciler.raycluster.validation import validate_spec as validate_raycluster_spec
from services.reconciler.rayjob.names import MAX_RAYJOB_NAME_LENGTH

InvalidReason = Literal["InvalidRayJobMetadata", "InvalidRayJobSpec", "InvalidRayJobStatus"]

SPEC_INVALID: Final = "The RayJob spec is invalid: "


_IMPACT_ORDER: Final = ("DeleteWorkers", "DeleteCluster", "DeleteSelf")


class RayJobInvalid(msgspec.Struct, frozen=True, kw_only=True):
    """Why a RayJob failed validation: the Event reason and KubeRay's message."""

    reason: InvalidReason
    message: str


def validate_rayjob_metadata(metadata: Mapping[str, Any]) -> str | None:
    """``ValidateRayJobMetadata``: name length ≤ 47 and a DNS-1035 label."""
    name = metadata.get("name")
    name = name if isinstance(name, str) else ""
    if len(name) > MAX_RAYJOB_NAME_LENGTH:
        return (
            "The RayJob metadata is invalid: RayJob name should be no more than " f"{MAX_RAYJOB_NAME_LENGTH} characters"
        )
    errors = dns1035_errors(name)
    if errors:
        return f"The RayJob metadata is invalid: RayJob name should be a valid DNS1035 label: [{' '.join(errors)}]"
    return None


def validate_rayjob_status(spec: RayJobSpec, status: Mapping[str, Any]) -> str | None:
    """``ValidateRayJobStatus``: ``Waiting`` only exists in InteractiveMode."""
    if status.get("jobDeploymentStatus") == JOB_DEPLOYMENT_WAITING and spec.submission_mode != INTERACTIVE_MODE:
        return (
            "The RayJob status is invalid: JobDeploymentStatus cannot be `Waiting` when SubmissionMode "
            "is not InteractiveMode"
        )
    return None


def runtime_env_error(runtime_env_yaml: str) -> str | None:
    """KubeRay's ``UnmarshalRuntimeEnvYAML`` check: the text must be a YAML mapping (or empty)."""
    try:
        loaded = yaml.safe_load(runtime_env_yaml)
    except yaml.YAMLError as exc:
        return f"failed to unmarshal RuntimeEnvYAML: {runtime_env_yaml}: {exc}"
    except (RecursionError, ValueError, TypeError) as exc:  # pathological input; still an invalid spec
        return f"failed to unmarshal RuntimeEnvYAML: {runtime_env_yaml}: {exc}"
    if loaded is not None and not isinstance(loaded, dict):
        return (
            f"failed to unmarshal RuntimeEnvYAML: {runtime_env_yaml}: cannot unmarshal "
            f"{type(loaded).__name__} into map[string]interface {{}}"
        )
    return None


def validate_rayjob_spec(
    spec: RayJobSpec, *, raw_spec: Mapping[str, Any], annotations: Mapping[str, str], config: OperatorConfig
) -> str | None:
    """``ValidateRayJobSpec`` (docs/behaviour.md#8, RayJob), first failure wins.

    Args:
        spec: the typed RayJob spec (or a RayCronJob's jobTemplate).
        raw_spec: the same spec as JSON (the cluster validator checks which fields were written).
        annotations: the RayJob's annotations (the cluster validator reads GCS FT annotations).
        config: operator configuration (gate RayJobDeletionPolicy, and what the cluster validator reads).

    Returns:
        KubeRay's error message, or None when the spec is valid.
    """
    if spec.suspend and not spec.shutdown_after_job_finishes:
        return SPEC_INVALID + ("a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended")
    if spec.ttl_seconds_after_finished < 0:
        return SPEC_INVALID + "TTLSecondsAfterFinished must be a non-negative integer"
    gates = config.gates
    deletion_error = _deletion_configuration_error(spec, gates)
    if deletion_error is not None:
        return deletion_error
    selector = spec.cluster_selector or {}
    selector_mode = len(selector) != 0
    if spec.suspend and selector_mode:
        return SPEC_INVALID + "the ClusterSelector mode doesn't support the suspend operation"
    if spec.ray_cluster_spec is None and not selector_mode:
        return SPEC_INVALID + "one of RayClusterSpec or ClusterSelector must be set"
    if selector_mode:
        if not selector.get(conventions.LABEL_CLUSTER):
            return "cluster name in ClusterSelector should not be empty"
        if spec.submission_mode == SIDECAR_MODE:
            return "ClusterSelector is not supported in SidecarMode"
        if spec.backoff_limit > 0:
            return SPEC_INVALID + "BackoffLimit is incompatible with ClusterSelector mode"
    if spec.submission_mode not in SUBMISSION_MODES:
        # raybus: KubeRay's CRD enum rejects this at admission; the typed view keeps a plain string.
        return SPEC_INVALID + (
            f"submissionMode {spec.submission_mode!r} is not one of "
            f"{K8S_JOB_MODE}, {HTTP_MODE}, {INTERACTIVE_MODE}, {SIDECAR_MODE}"
        )
    if spec.submission_mode == INTERACTIVE_MODE and spec.backoff_limit > 0:
        return SPEC_INVALID + "BackoffLimit is incompatible with InteractiveMode"
    if spec.submission_mode == SIDECAR_MODE:
        if spec.submitter_pod_template is not None:
            return "Currently, SidecarMode doesn't support SubmitterPodTemplate"
        if spec.submitter_config is not None:
            return "Currently, SidecarMode doesn't support SubmitterConfig"
        if spec.ray_cluster_spec is not None and _head_restart_policy(spec.ray_cluster_spec) not in ("", "Never"):
            return "restartPolicy for head Pod should be Never or unset when using SidecarMode"
    if spec.ray_cluster_spec is not None:
        auth = spec.ray_cluster_spec.auth_options
        if auth is not None and auth.enable_k8s_token_auth is True:
            return SPEC_INVALID + "K8s token auth mode is currently not supported for RayJob"
        raw_cluster = raw_spec.get("rayClusterSpec")
        view = msgspec.structs.replace(
            view_of(spec.ray_cluster_spec, name="", namespace="", annotations=dict(annotations)),
            raw_spec=dict(raw_cluster) if isinstance(raw_cluster, Mapping) else {},
        )
        cluster_error = validate_raycluster_spec(view, config)
        if cluster_error:
            return SPEC_INVALID + cluster_error
    env_error = runtime_env_error(spec.runtime_env_yaml)
    if env_error is not None:
        return env_error
    if spec.active_deadline_seconds is not None and spec.active_deadline_seconds <= 0:
        return SPEC_INVALID + "activeDeadlineSeconds must be a positive integer"
    if spec.pre_running_deadline_seconds is not None and spec.pre_running_deadline_seconds <= 0:
        return SPEC_INVALID + "preRunningDeadlineSeconds must be a positive integer"
    if spec.backoff_limit < 0:
        return SPEC_INVALID + "backoffLimit must be a positive integer"
    return None


def validate_rayjob(
    obj: Mapping[str, Any], *, config: OperatorConfig
) -> tuple[RayJobSpec | None, RayJobInvalid | None]:
    """Decode and validate a RayJob object: metadata, then spec, then status (KubeRay's order).

    Returns:
        ``(spec, None)`` when valid; ``(spec or None, RayJobInvalid)`` otherwise. The spec is None only
        when it could not be decoded at all.
    """
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    metadata_error = validate_rayjob_metadata(metadata)
    if metadata_error is not None:
        return None, RayJobInvalid(reason="InvalidRayJobMetadata", message=metadata_error)
    raw_spec = obj.get("spec")
    spec, decode_error = decode_spec(raw_spec)
    if spec is None:
        return None, RayJobInvalid(reason="InvalidRayJobSpec", message=SPEC_INVALID + decode_error)
    annotations = string_map(metadata.get("annotations"))
    assert isinstance(raw_spec, Mapping)
    spec_error = validate_rayjob_spec(spec, raw_spec=raw_spec, annotations=annotations, config=config)
    if spec_error is not None:
        return spec, RayJobInvalid(reason="InvalidRayJobSpec", message=spec_error)
    status = obj.get("status")
    status_error = validate_rayjob_status(spec, status if isinstance(status, Mapping) else {})
    if status_error is not None:
        return spec, RayJobInvalid(reason="InvalidRayJobStatus", message=status_error)
    return spec, None


def decode_spec(raw: object) -> tuple[RayJobSpec | None, str]:
    """Decode a RayJob spec leniently (as the API server would accept it); ``(None, error)`` on failure."""
    if not isinstance(raw, Mapping):
        return None, "spec must be an object"
    try:
        return msgspec.convert(raw, RayJobSpec, strict=False), ""
    except (msgspec.ValidationError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        return None, str(exc)


def string_map(value: object) -> dict[str, str]:
    """A ``map[string]string`` from untrusted data: non-string entries are dropped."""
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _head_restart_policy(cluster_spec: RayClusterSpec) -> str:
    template = cluster_spec.head_group_spec.template
    pod_spec = template.get("spec") if isinstance(template, Mapping) else None
    policy = pod_spec.get("restartPolicy") if isinstance(pod_spec, Mapping) else None
    return policy if isinstance(policy, str) else ""


def _deletion_configuration_error(spec: RayJobSpec, gates: FeatureGates) -> str | None:
    if not spec.shutdown_after_job_finishes and spec.ttl_seconds_after_finished > 0:
        return SPEC_INVALID + (
            "a RayJob with shutdownAfterJobFinishes set to false cannot have TTLSecondsAfterFinished"
        )
    strategy = spec.deletion_strategy
    if strategy is None:
        return None
    if not gates.ray_job_deletion_policy:
        return "RayJobDeletionPolicy feature gate must be enabled to use DeletionStrategy"
    legacy = strategy.on_success is not None or strategy.on_failure is not None
    rules = bool(strategy.deletion_rules)
    if rules and spec.shutdown_after_job_finishes:
        return SPEC_INVALID + (
            "spec.shutdownAfterJobFinishes and spec.deletionStrategy.deletionRules are mutually exclusive"
        )
    if rules and legacy:
        return SPEC_INVALID + "Cannot use both legacy onSuccess/onFailure fields and deletionRules simultaneously"
    if legacy:
        return _legacy_policies_error(spec)
    if rules:
        return _deletion_rules_error(spec)
    return SPEC_INVALID + (
        "DeletionStrategy requires either BOTH onSuccess and onFailure, OR the deletionRules field (cannot be empty)"
    )


def _legacy_policies_error(spec: RayJobSpec) -> str | None:
    strategy = spec.deletion_strategy
    assert strategy is not None
    on_success, on_failure = strategy.on_success, strategy.on_failure
    if on_success is None or on_failure is None:
        return (
            "both DeletionStrategy.OnSuccess and DeletionStrategy.OnFailure must be set when using the "
            "legacy deletion policy fields of DeletionStrategy"
        )
    if on_success.policy is None:
        return (
            "the DeletionPolicyType field of DeletionStrategy.OnSuccess cannot be unset when "
            "DeletionStrategy is enabled"
        )
    if on_failure.policy is None:
        return (
            "the DeletionPolicyType field of DeletionStrategy.OnFailure cannot be unset when "
            "DeletionStrategy is enabled"
        )
    if spec.cluster_selector:
        if on_success.policy in ("DeleteCluster", "DeleteWorkers"):
            return f"the ClusterSelector mode doesn't support DeletionStrategy={on_success.policy} on success"
        if on_failure.policy in ("DeleteCluster", "DeleteWorkers"):
            return f"the ClusterSelector mode doesn't support DeletionStrategy={on_failure.policy} on failure"
    if "DeleteWorkers" in (on_success.policy, on_failure.policy) and _autoscaling(spec):
        return "DeletionStrategy=DeleteWorkers currently does not support RayCluster with autoscaling enabled"
    if spec.shutdown_after_job_finishes and "DeleteNone" in (on_success.policy, on_failure.policy):
        return SPEC_INVALID + "shutdownAfterJobFinshes is set to 'true' while deletion policy is 'DeleteNone'"
    return None


def _autoscaling(spec: RayJobSpec) -> bool:
    return spec.ray_cluster_spec is not None and autoscaling_enabled(spec.ray_cluster_spec)


def _deletion_rules_error(spec: RayJobSpec) -> str | None:
    strategy = spec.deletion_strategy
    assert strategy is not None
    assert strategy.deletion_rules is not None
    selector_mode = bool(spec.cluster_selector)
    errors: list[str] = []
    by_job_status: dict[str, dict[str, int]] = {}
    by_deployment_status: dict[str, dict[str, int]] = {}
    for index, rule in enumerate(strategy.deletion_rules):
        condition_error = _condition_error(rule)
        if condition_error is not None:
            errors.append(f"deletionRules[{index}]: {condition_error}")
            continue
        if selector_mode and rule.policy in ("DeleteCluster", "DeleteWorkers"):
            errors.append(
                f"deletionRules[{index}]: DeletionPolicyType '{rule.policy}' not supported when ClusterSelector is set"
            )
            continue
        if _autoscaling(spec) and rule.policy == "DeleteWorkers":
            errors.append(
                f"deletionRules[{index}]: DeletionPolicyType 'DeleteWorkers' not supported with autoscaling enabled"
            )
            continue
        condition = rule.condition
        group: dict[str, dict[str, int]]
        label: str
        value: str
        if condition.job_status is not None:
            group, label, value = by_job_status, "JobStatus", condition.job_status
        else:
            assert condition.job_deployment_status is not None
            group, label, value = by_deployment_status, "JobDeploymentStatus", condition.job_deployment_status
        ttls = group.setdefault(value, {})
        if rule.policy in ttls:
            errors.append(
                f"deletionRules[{index}]: duplicate rule for DeletionPolicyType '{rule.policy}' and {label} '{value}'"
            )
            continue
        ttls[rule.policy] = condition.ttl_seconds
    # Go iterates maps in random order; raybus sorts so the message is deterministic.
    for value in sorted(by_job_status):
        errors.extend(_ttl_consistency_errors(by_job_status[value], label="JobStatus", value=value))
    for value in sorted(by_deployment_status):
        errors.extend(_ttl_consistency_errors(by_deployment_status[value], label="JobDeploymentStatus", value=value))
    return "\n".join(errors) if errors else None


def _condition_error(rule: DeletionRule) -> str | None:
    condition = rule.condition
    has_job_status = condition.job_status is not None
    has_deployment_status = condition.job_deployment_status is not None
    if has_job_status and has_deployment_status:
        return "cannot set both JobStatus and JobDeploymentStatus at the same time"
    if not has_job_status and not has_deployment_status:
        return "exactly one of JobStatus and JobDeploymentStatus must be set"
    if condition.ttl_seconds < 0:
        return "TTLSeconds must be non-negative"
    return None


def _ttl_consistency_errors(policy_ttls: Mapping[str, int], *, label: str, value: str) -> list[str]:
    """TTLs must not decrease along DeleteWorkers → DeleteCluster → DeleteSelf."""
    errors: list[str] = []
    previous: tuple[str, int] | None = None
    for policy in _IMPACT_ORDER:
        if policy not in policy_ttls:
            continue
        ttl = policy_ttls[policy]
        if previous is not None and ttl < previous[1]:
            errors.append(f"for {label} '{value}': {policy} TTL ({ttl}) must be >= {previous[0]} TTL ({previous[1]})")
        previous = (policy, ttl)
    return errors
