"""The RayCluster as reconcile code reads it: typed spec and status plus the metadata it needs.

Role: decode the projected object once per reconcile into a :class:`ClusterView`, and answer the small
derived questions every builder asks (head port, head Service name and FQDN, autoscaler on/v2, GCS FT
backend, who created the cluster, is token auth on, is a status condition true, how many replicas
and pods a worker group wants). Builders of RayJob/RayService code can build a
view from any ``RayClusterSpec`` with :func:`view_of`.

Invariants: pure, no defaults invented beyond KubeRay's (nil rayStartParams mean ``{}``); metadata
values of the wrong type are treated as absent, so a view can always be built once the spec decoded.

Not here: validation (``validation``), object bodies (``pod_bodies``, ``services``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from schema.config import OperatorConfig
from schema.ray import RayClusterSpec, RayClusterStatus, WorkerGroupSpec, conventions, decode_as
from services.reconciler.common.memo import by_identity
from services.reconciler.raycluster import names

CreatorCRD = Literal["RayCluster", "RayJob", "RayService"]


class ClusterView(msgspec.Struct, frozen=True, kw_only=True):
    """A decoded RayCluster: metadata fields, typed spec and status, and the raw object."""

    name: str
    namespace: str
    uid: str
    resource_version: str
    generation: int
    labels: dict[str, str]
    annotations: dict[str, str]
    finalizers: tuple[str, ...]
    deletion_timestamp: str
    spec: RayClusterSpec
    status: RayClusterStatus
    raw_spec: dict[str, Any]


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


@by_identity()
def decode_view(obj: Mapping[str, Any]) -> ClusterView:
    """Decode a projected RayCluster object.

    Raises:
        msgspec.ValidationError: the spec does not fit the RayCluster types (a malformed CR).
    """
    raw_meta = obj.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    raw_spec = obj.get("spec")
    if not isinstance(raw_spec, dict):
        raise msgspec.ValidationError("Expected `object`, got `null` - at `$.spec`")
    spec = decode_as(raw_spec, RayClusterSpec)
    try:
        raw_status = obj.get("status")
        status = decode_as(raw_status, RayClusterStatus) if isinstance(raw_status, dict) else RayClusterStatus()
    except msgspec.ValidationError:
        # A status we cannot read is rewritten from scratch, never a reason to stop reconciling.
        status = RayClusterStatus()
    generation = meta.get("generation")
    finalizers = meta.get("finalizers")
    return ClusterView(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        generation=generation if isinstance(generation, int) and not isinstance(generation, bool) else 0,
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
        finalizers=tuple(f for f in finalizers if isinstance(f, str)) if isinstance(finalizers, list) else (),
        deletion_timestamp=str(meta.get("deletionTimestamp") or ""),
        spec=spec,
        status=status,
        raw_spec=raw_spec,
    )


def view_of(
    spec: RayClusterSpec,
    *,
    name: str,
    namespace: str,
    uid: str = "",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> ClusterView:
    """A view of a cluster that may not exist yet (RayJob/RayService builders use it)."""
    return ClusterView(
        name=name,
        namespace=namespace,
        uid=uid,
        resource_version="",
        generation=0,
        labels=dict(labels or {}),
        annotations=dict(annotations or {}),
        finalizers=(),
        deletion_timestamp="",
        spec=spec,
        status=RayClusterStatus(),
        raw_spec={},
    )


def head_start_params(spec: RayClusterSpec) -> dict[str, str]:
    """The head group's rayStartParams (nil → empty)."""
    return dict(spec.head_group_spec.ray_start_params or {})


def head_port(spec: RayClusterSpec) -> str:
    """The GCS port: head rayStartParams ``port`` or 6379 (a string, as it goes into env/flags)."""
    return (spec.head_group_spec.ray_start_params or {}).get("port", str(conventions.DEFAULT_GCS_PORT))


def head_service_name(view: ClusterView) -> str:
    """The head Service's name: the user's ``headService.metadata.name`` or ``<c>-head-svc``."""
    user = view.spec.head_group_spec.head_service or {}
    meta = user.get("metadata")
    user_name = meta.get("name") if isinstance(meta, dict) else None
    return names.head_service_name(view.name, user_name if isinstance(user_name, str) else "")


def head_fqdn(view: ClusterView, config: OperatorConfig) -> str:
    """The head Service's cluster DNS name."""
    return names.head_service_fqdn(head_service_name(view), view.namespace, config.switches.cluster_domain)


def autoscaling_enabled(spec: RayClusterSpec) -> bool:
    """``enableInTreeAutoscaling: true``."""
    return spec.enable_in_tree_autoscaling is True


def container_env_value(template: dict[str, Any], name: str) -> str | None:
    """The literal value of env ``name`` in containers[0] of a pod template, or None."""
    container = ray_container(template)
    env = container.get("env") if container else None
    if not isinstance(env, list):
        return None
    for item in env:
        if isinstance(item, dict) and item.get("name") == name:
            value = item.get("value")
            return value if isinstance(value, str) else ""
    return None


def head_env_enables_v2(spec: RayClusterSpec) -> bool:
    """Head env ``RAY_enable_autoscaler_v2`` is "1" or "true"."""
    value = container_env_value(spec.head_group_spec.template, "RAY_enable_autoscaler_v2")
    return value is not None and value.lower() in ("1", "true")


def autoscaler_v2(spec: RayClusterSpec) -> bool:
    """Autoscaler v2 is on (options ``version: v2`` or the head env switch)."""
    options = spec.autoscaler_options
    if options is not None and options.version == "v2":
        return True
    return head_env_enables_v2(spec)


def autoscaler_version(spec: RayClusterSpec) -> Literal["v1", "v2"] | None:
    """The explicit autoscaler version from autoscalerOptions (None: Ray decides)."""
    options = spec.autoscaler_options
    return options.version if options is not None else None


def gcs_ft_enabled(view: ClusterView) -> bool:
    """GCS FT is on: gcsFaultToleranceOptions set, or annotation ``ray.io/ft-enabled`` is "true"."""
    if view.spec.gcs_fault_tolerance_options is not None:
        return True
    return view.annotations.get(conventions.ANN_FT_ENABLED, "").lower() == "true"


def gcs_backend(view: ClusterView) -> Literal["redis", "rocksdb"] | None:
    """The GCS FT backend, or None when GCS FT is off."""
    if not gcs_ft_enabled(view):
        return None
    options = view.spec.gcs_fault_tolerance_options
    if options is not None and options.backend == "rocksdb":
        return "rocksdb"
    return "redis"


def creator_crd(view: ClusterView) -> CreatorCRD:
    """Who created the cluster, from the ``ray.io/originated-from-crd`` label."""
    origin = view.labels.get(conventions.LABEL_ORIGIN_CRD, "")
    if origin == "RayJob":
        return "RayJob"
    if origin == "RayService":
        return "RayService"
    return "RayCluster"


def serve_service_enabled(view: ClusterView) -> bool:
    """Annotation ``ray.io/enable-serve-service: "true"`` (create ``<c>-serve-svc``)."""
    return view.annotations.get(conventions.ANN_ENABLE_SERVE_SERVICE, "") == "true"


def serve_labels_enabled(view: ClusterView) -> bool:
    """Pods carry ``ray.io/serve``: RayService clusters and clusters with a serve Service."""
    return creator_crd(view) == "RayService" or serve_service_enabled(view)


def token_auth_enabled(spec: RayClusterSpec) -> bool:
    """``authOptions.mode == token``."""
    return spec.auth_options is not None and spec.auth_options.mode == "token"


def k8s_token_auth_enabled(spec: RayClusterSpec) -> bool:
    """Token auth through projected ServiceAccount tokens."""
    return token_auth_enabled(spec) and bool(spec.auth_options and spec.auth_options.enable_k8s_token_auth)


def auth_secret(view: ClusterView) -> str:
    """The Secret holding ``auth_token``: the user's ``secretName`` or CheckName(``<c>``)."""
    options = view.spec.auth_options
    if options is not None and options.secret_name:
        return options.secret_name
    return names.auth_secret_name(view.name)


def ray_container(template: dict[str, Any]) -> dict[str, Any] | None:
    """containers[0] of a pod template, or None when the template has no usable container."""
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return None
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
        return None
    first: dict[str, Any] = containers[0]
    return first


def parse_version(raw: str) -> tuple[int, int, int] | None:
    """``major.minor.patch`` of a Ray version (a leading ``v`` and suffixes tolerated), or None."""
    text = raw.strip().lstrip("v")
    parts = text.split(".")
    if len(parts) < 2:
        return None
    numbers: list[int] = []
    for part in parts[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            return None
        numbers.append(int(digits))
    while len(numbers) < 3:
        numbers.append(0)
    return numbers[0], numbers[1], numbers[2]


def version_at_least(raw: str, minimum: tuple[int, int, int]) -> bool:
    """``raw`` parses and is ≥ ``minimum``."""
    parsed = parse_version(raw)
    return parsed is not None and parsed >= minimum


def condition_true(view: ClusterView, condition_type: str) -> bool:
    """True when the RayCluster's status has ``condition_type`` = True."""
    return any(c.type == condition_type and c.status == "True" for c in view.status.conditions or ())


def group_replicas(group: WorkerGroupSpec) -> int:
    """clamp(replicas, min, max), 0 for a suspended group (replicas, not pods)."""
    if group.suspend:
        return 0
    if group.replicas < group.min_replicas:
        return group.min_replicas
    if group.replicas > group.max_replicas:
        return group.max_replicas
    return group.replicas


def desired_pods(group: WorkerGroupSpec) -> int:
    """The pods a group wants: ``group_replicas x numOfHosts``."""
    return group_replicas(group) * max(group.num_of_hosts, 1)
