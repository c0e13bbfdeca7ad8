"""The RayService as reconcile code reads it: metadata, the typed spec, the raw spec, and the upgrade
strategy read leniently so validation can word its errors like KubeRay.

Role: decode the projected object once per pass into a :class:`ServiceModel` and answer the derived
questions the passes ask (incremental upgrade on? zero-downtime on? deletion delay, initializing
timeout, goal spec hash).

Invariants: pure and total: :func:`read_model` never raises. ``upgradeStrategy`` and
``rayClusterDeletionDelaySeconds`` are read from the raw spec (KubeRay's pointers: a missing
``stepSizePercent`` is a validation error with KubeRay's message, not a decode error), and the rest
of the spec is decoded with the schema types.

Not here: the validation rules themselves (``validation``), builders (``clusters``, ``kube_services``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import msgspec

from schema.config import OperatorConfig
from schema.objects import integer, mapping, string_map, text
from schema.ray import conventions
from schema.ray.common import MAX_INT32
from schema.ray.rayservice import NEW_CLUSTER, NEW_CLUSTER_WITH_INCREMENTAL_UPGRADE, RayServiceSpec
from services.reconciler.raycluster.spechash import spec_hash
from services.reconciler.rayservice import names
from services.reconciler.rayservice.godur import parse_timeout

_LENIENT_FIELDS = ("upgradeStrategy", "rayClusterDeletionDelaySeconds")


class UpgradeOptions(msgspec.Struct, frozen=True, kw_only=True):
    """``clusterUpgradeOptions`` as KubeRay's pointers see them (None: unset)."""

    max_surge_percent: int | None = 100
    step_size_percent: int | None = None
    interval_seconds: int | None = None
    gateway_class_name: str = ""


class ServiceModel(msgspec.Struct, frozen=True, kw_only=True):
    """One RayService, decoded once per pass."""

    name: str
    namespace: str
    uid: str
    resource_version: str
    generation: int
    labels: dict[str, str]
    annotations: dict[str, str]
    finalizers: tuple[str, ...]
    deleting: bool
    raw_spec: dict[str, Any]
    raw_status: dict[str, Any]
    spec: RayServiceSpec | None
    decode_error: str
    upgrade_type: str | None
    upgrade_type_error: str
    upgrade_options: UpgradeOptions | None
    deletion_delay_seconds: int | None

    @property
    def cluster_config(self) -> dict[str, Any]:
        """The raw ``rayClusterConfig`` (a deep copy; callers may mutate it)."""
        return copy.deepcopy(dict(mapping(self.raw_spec.get("rayClusterConfig"))))


def _upgrade(raw_spec: Mapping[str, Any]) -> tuple[str | None, str, UpgradeOptions | None]:
    strategy = raw_spec.get("upgradeStrategy")
    if strategy is None:
        return None, "", None
    if not isinstance(strategy, Mapping):
        return None, "upgradeStrategy must be an object", None
    raw_type = strategy.get("type")
    type_error = ""
    upgrade_type: str | None = None
    if isinstance(raw_type, str):
        upgrade_type = raw_type
    elif raw_type is not None:
        type_error = f"Spec.UpgradeStrategy.Type value {raw_type!r} is not a string"
    raw_options = strategy.get("clusterUpgradeOptions")
    options: UpgradeOptions | None = None
    if isinstance(raw_options, Mapping):
        surge = raw_options.get("maxSurgePercent")
        options = UpgradeOptions(
            max_surge_percent=100 if surge is None else integer(surge),
            step_size_percent=integer(raw_options.get("stepSizePercent")),
            interval_seconds=integer(raw_options.get("intervalSeconds")),
            gateway_class_name=text(raw_options.get("gatewayClassName")),
        )
    return upgrade_type, type_error, options


def read_model(obj: Mapping[str, Any]) -> ServiceModel:
    """Decode a projected RayService (never raises; ``decode_error`` says what could not be read)."""
    metadata = mapping(obj.get("metadata"))
    raw_spec_value = obj.get("spec")
    raw_spec = dict(raw_spec_value) if isinstance(raw_spec_value, Mapping) else {}
    spec: RayServiceSpec | None = None
    decode_error = ""
    if not isinstance(raw_spec_value, Mapping):
        decode_error = "spec must be an object"
    else:
        sanitized = {k: v for k, v in raw_spec.items() if k not in _LENIENT_FIELDS}
        try:
            spec = msgspec.convert(sanitized, RayServiceSpec, strict=False)
        except (msgspec.ValidationError, TypeError, ValueError, OverflowError, RecursionError) as exc:
            decode_error = str(exc)
    upgrade_type, type_error, options = _upgrade(raw_spec)
    generation = metadata.get("generation")
    finalizers = metadata.get("finalizers")
    delay_raw = raw_spec.get("rayClusterDeletionDelaySeconds")
    return ServiceModel(
        name=text(metadata.get("name")),
        namespace=text(metadata.get("namespace")),
        uid=text(metadata.get("uid")),
        resource_version=text(metadata.get("resourceVersion")),
        generation=generation if isinstance(generation, int) and not isinstance(generation, bool) else 0,
        labels=string_map(metadata.get("labels")),
        annotations=string_map(metadata.get("annotations")),
        finalizers=tuple(f for f in finalizers if isinstance(f, str)) if isinstance(finalizers, list) else (),
        deleting=bool(metadata.get("deletionTimestamp")),
        raw_spec=raw_spec,
        raw_status=dict(mapping(obj.get("status"))),
        spec=spec,
        decode_error=decode_error,
        upgrade_type=upgrade_type,
        upgrade_type_error=type_error,
        upgrade_options=options,
        deletion_delay_seconds=None if delay_raw is None else integer(delay_raw),
    )


def incremental_enabled(model: ServiceModel, config: OperatorConfig) -> bool:
    """KubeRay's ``IsIncrementalUpgradeEnabled``: the gate is on and the type is the incremental one."""
    return config.gates.ray_service_incremental_upgrade and model.upgrade_type == NEW_CLUSTER_WITH_INCREMENTAL_UPGRADE


def zero_downtime_enabled(model: ServiceModel, config: OperatorConfig) -> bool:
    """KubeRay's ``isZeroDowntimeUpgradeEnabled``: the upgrade type wins over ENABLE_ZERO_DOWNTIME."""
    if model.upgrade_type is not None:
        if config.gates.ray_service_incremental_upgrade:
            return model.upgrade_type in (NEW_CLUSTER, NEW_CLUSTER_WITH_INCREMENTAL_UPGRADE)
        return model.upgrade_type == NEW_CLUSTER
    return config.switches.enable_zero_downtime


def deletion_delay(model: ServiceModel) -> int:
    """``rayClusterDeletionDelaySeconds`` (default 60; a negative value never passes validation).

    Capped at int32, the field's type in KubeRay's CRD: a larger value cannot come through the API server,
    and must not overflow the date arithmetic of a pass if it comes some other way."""
    delay = model.deletion_delay_seconds
    return names.DEFAULT_DELETION_DELAY_SECONDS if delay is None or delay < 0 else min(delay, MAX_INT32)


def initializing_timeout_ns(model: ServiceModel) -> int | None:
    """The ``ray.io/initializing-timeout`` annotation in nanoseconds (None: absent or unusable)."""
    raw = model.annotations.get(conventions.ANN_INITIALIZING_TIMEOUT, "")
    if not raw:
        return None
    parsed = parse_timeout(raw)
    return parsed if parsed is not None and parsed > 0 else None


def goal_hash(cluster_config: Mapping[str, Any], *, groups: int | None = None) -> str:
    """The spec hash of ``rayClusterConfig`` (docs/behaviour.md#2.3, #6.3) with ``suspend`` cleared; with ``groups``,
    of the config cut down to its first ``groups`` worker groups (the "appended groups" test)."""
    spec = {k: v for k, v in cluster_config.items() if k != "suspend"}
    if groups is not None:
        workers = spec.get("workerGroupSpecs")
        spec["workerGroupSpecs"] = list(workers[:groups]) if isinstance(workers, list) else []
    return spec_hash(spec)
