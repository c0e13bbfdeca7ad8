"""RayService validation (docs/behaviour.md#8): metadata, then spec, first failure wins, KubeRay's messages.

Role: ``validate(model, config)`` answers "is this RayService acceptable, and if not, which Event
reason and which message?" The reconcile pass turns a failure into a Warning Event and
``Ready=False/ValidationFailed`` (docs/behaviour.md#6.1 step 6).

Invariants: pure and total: never raises on any input. The embedded RayClusterSpec is checked by the
RayCluster controller's own validator (never a copy of it); a spec the schema types cannot hold is
reported as an ``InvalidRayServiceSpec`` with the decoder's message.

Not here: CRD-level rules the API server enforces (``managedBy`` values, minimums), except where an
object that bypassed them would otherwise crash reconcile code.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from schema.config import OperatorConfig
from schema.objects import integer, mapping
from schema.ray import conventions
from schema.ray.rayservice import UPGRADE_TYPES
from services.reconciler.common.validation import dns1035_errors
from services.reconciler.raycluster.model import autoscaling_enabled, view_of
from services.reconciler.raycluster.validation import validate_spec as validate_raycluster_spec
from services.reconciler.rayservice import names
from services.reconciler.rayservice.godur import parse_go_duration
from services.reconciler.rayservice.model import ServiceModel, incremental_enabled

InvalidReason = Literal["InvalidRayServiceMetadata", "InvalidRayServiceSpec"]

METADATA_INVALID: Final = "The RayService metadata is invalid: "
SPEC_INVALID: Final = "The RayService spec is invalid: "


class RayServiceInvalid(msgspec.Struct, frozen=True, kw_only=True):
    """Why a RayService failed validation: the Event reason and KubeRay's message."""

    reason: InvalidReason
    message: str


def _initializing_timeout_error(annotations: dict[str, str]) -> str | None:
    value = annotations.get(conventions.ANN_INITIALIZING_TIMEOUT, "")
    if not value:
        return None
    key = conventions.ANN_INITIALIZING_TIMEOUT
    parsed = parse_go_duration(value)
    if parsed is not None:
        return None if parsed > 0 else f"annotation {key} must be a positive duration, got: {value}"
    seconds = integer(value)
    if seconds is not None and value.strip() == value:
        return None if seconds > 0 else f"annotation {key} must be a positive integer (seconds), got: {value}"
    return (
        f"annotation {key} has invalid format: {value}. Expected Go duration format (e.g., '5m', '1h') "
        "or positive integer seconds"
    )


def validate_metadata(model: ServiceModel) -> str | None:
    """``ValidateRayServiceMetadata``: name length ≤ 47, DNS-1035, the initializing-timeout annotation."""
    if len(model.name) > names.MAX_RAYSERVICE_NAME_LENGTH:
        return (
            METADATA_INVALID + f"RayService name should be no more than {names.MAX_RAYSERVICE_NAME_LENGTH} characters"
        )
    errors = dns1035_errors(model.name)
    if errors:
        return METADATA_INVALID + f"RayService name should be a valid DNS1035 label: [{' '.join(errors)}]"
    timeout_error = _initializing_timeout_error(model.annotations)
    if timeout_error is not None:
        return METADATA_INVALID + "RayService annotations is invalid: " + timeout_error
    return None


def _upgrade_options_error(model: ServiceModel) -> str | None:
    """``ValidateClusterUpgradeOptions`` (incremental upgrade only)."""
    assert model.spec is not None
    if not autoscaling_enabled(model.spec.ray_cluster_config):
        return "Ray Autoscaler is required for NewClusterWithIncrementalUpgrade"
    options = model.upgrade_options
    if options is None:
        return "ClusterUpgradeOptions are required for NewClusterWithIncrementalUpgrade"
    surge = options.max_surge_percent
    if surge is None or surge < 0 or surge > 100:
        return "maxSurgePercent must be between 0 and 100"
    step = options.step_size_percent
    if step is None or step < 0 or step > 100:
        return "stepSizePercent must be between 0 and 100"
    if step > surge:
        return "stepSizePercent must be less than or equal to maxSurgePercent"
    if options.interval_seconds is None or options.interval_seconds <= 0:
        return "intervalSeconds must be greater than 0"
    if not options.gateway_class_name:
        return "gatewayClassName is required for NewClusterWithIncrementalUpgrade"
    return None


def validate_spec(model: ServiceModel, config: OperatorConfig) -> str | None:
    """``ValidateRayServiceSpec`` (docs/behaviour.md#8, RayService), first failure wins; None when valid."""
    if model.spec is None:
        return SPEC_INVALID + model.decode_error
    cluster_spec = model.spec.ray_cluster_config
    auth = cluster_spec.auth_options
    if auth is not None and auth.enable_k8s_token_auth is True:
        return SPEC_INVALID + "K8s token auth mode is currently not supported for RayService"
    view = msgspec.structs.replace(
        view_of(cluster_spec, name="", namespace="", annotations=dict(model.annotations)),
        raw_spec=dict(mapping(model.raw_spec.get("rayClusterConfig"))),
    )
    cluster_error = validate_raycluster_spec(view, config)
    if cluster_error:
        return SPEC_INVALID + cluster_error
    head_service = cluster_spec.head_group_spec.head_service
    if head_service is not None and mapping(head_service.get("metadata")).get("name"):
        return SPEC_INVALID + "spec.rayClusterConfig.headGroupSpec.headService.metadata.name should not be set"
    if model.upgrade_type_error:
        return SPEC_INVALID + model.upgrade_type_error
    if model.upgrade_type is not None and model.upgrade_type not in UPGRADE_TYPES:
        return SPEC_INVALID + (
            f"Spec.UpgradeStrategy.Type value {model.upgrade_type} is invalid, valid options are "
            "NewClusterWithIncrementalUpgrade, NewCluster, or None"
        )
    raw_delay = model.raw_spec.get("rayClusterDeletionDelaySeconds")
    if raw_delay is not None:
        if model.deletion_delay_seconds is None:
            return SPEC_INVALID + f"Spec.RayClusterDeletionDelaySeconds must be an integer, got {raw_delay!r}"
        if model.deletion_delay_seconds < 0:
            return SPEC_INVALID + (
                "Spec.RayClusterDeletionDelaySeconds should be a non-negative integer, "
                f"got {model.deletion_delay_seconds}"
            )
    if incremental_enabled(model, config):
        options_error = _upgrade_options_error(model)
        if options_error is not None:
            return SPEC_INVALID + options_error
    return None


def validate(model: ServiceModel, config: OperatorConfig) -> RayServiceInvalid | None:
    """Metadata, then spec (KubeRay's ``validateRayService`` order); None when the RayService is valid."""
    metadata_error = validate_metadata(model)
    if metadata_error is not None:
        return RayServiceInvalid(reason="InvalidRayServiceMetadata", message=metadata_error)
    try:
        spec_error = validate_spec(model, config)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError) as exc:
        # A shape the typed view accepted but a check did not anticipate: still a spec error.
        spec_error = SPEC_INVALID + f"{type(exc).__name__}: {exc}"
    if spec_error is not None:
        return RayServiceInvalid(reason="InvalidRayServiceSpec", message=spec_error)
    return None
