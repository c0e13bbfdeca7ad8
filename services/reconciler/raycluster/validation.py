"""RayCluster validation (docs/behaviour.md#8): metadata, then ``ValidateRayClusterSpec``; first failure wins.

Role: return the message of the first rule a RayCluster breaks, or "" when it is valid. The reconcile
turns a message into a Warning Event (``InvalidRayClusterMetadata`` / ``InvalidRayClusterSpec``) and
stops without touching status or children.

Invariants: rules run in docs/behaviour.md#8 order; every message text lives in ``validation_messages.MESSAGES``;
checks never raise on odd input (they read the typed spec, and ``shape`` has vetted the free-form
templates first).

Not here: the upgradeStrategy/status checks of the reconcile prelude (``reconcile``).
"""

from __future__ import annotations

import re
from typing import Final

from schema.config import OperatorConfig
from schema.ray import NetworkPolicyRules, RayClusterSpec, WorkerGroupNetworkPolicy, WorkerGroupSpec, conventions
from services.reconciler.common.memo import by_identity
from services.reconciler.common.validation import DNS1035
from services.reconciler.raycluster import model, shape
from services.reconciler.raycluster.model import ClusterView
from services.reconciler.raycluster.validation_messages import MESSAGES, message_for

MAX_NAME_LENGTH: Final = 53
_DNS1123: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_RESOURCE_PARAMS: Final = ("num-cpus", "num-gpus", "memory", "resources")
_TLS_ENV: Final = ("RAY_USE_TLS", "RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT")
_HISTORY_FORBIDDEN_ENV: Final = (
    "POD_IP",
    "FQ_RAY_IP",
    "RAY_CLUSTER_NAME",
    "RAY_CLUSTER_NAMESPACE",
    "RAY_ROLE",
    "OWNER_KIND",
    "OWNER_NAME",
    "EVENTS_PORT",
)


def validate_metadata(view: ClusterView) -> str:
    """docs/behaviour.md#8 metadata rules for a RayCluster name."""
    if len(view.name) > MAX_NAME_LENGTH:
        return message_for("name-too-long", max=MAX_NAME_LENGTH, n=len(view.name))
    if len(view.name) > 63 or not DNS1035.match(view.name):
        return message_for("name-dns1035", name=view.name)
    return ""


def valid_label_key(key: str) -> bool:
    """A Kubernetes qualified name (optional DNS-subdomain prefix)."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and _LABEL_NAME.match(name) is not None


def valid_label_value(value: str) -> bool:
    """A Kubernetes label value (empty allowed)."""
    return value == "" or (len(value) <= 63 and _LABEL_NAME.match(value) is not None)


def _env_names(template: dict[str, object]) -> set[str]:
    container = model.ray_container(template) or {}
    env = container.get("env")
    return {e.get("name", "") for e in env if isinstance(e, dict)} if isinstance(env, list) else set()


def _restart_policy(template: dict[str, object]) -> str:
    spec = template.get("spec")
    policy = spec.get("restartPolicy") if isinstance(spec, dict) else None
    return policy if isinstance(policy, str) else ""


def _templates(spec: RayClusterSpec) -> list[tuple[str, dict[str, object]]]:
    out: list[tuple[str, dict[str, object]]] = [("headGroupSpec", spec.head_group_spec.template)]
    out.extend((f"workerGroupSpecs[{g.group_name}]", g.template) for g in spec.worker_group_specs or ())
    return out


def _mount_problem(spec: RayClusterSpec, *, names_: tuple[str, ...], paths: tuple[str, ...]) -> str:
    for _, template in _templates(spec):
        pod_spec = template.get("spec")
        if not isinstance(pod_spec, dict):
            continue
        for volume in pod_spec.get("volumes") or []:
            if volume.get("name") in names_:
                return str(volume.get("name"))
        for container in pod_spec.get("containers") or []:
            for mount in container.get("volumeMounts") or []:
                if mount.get("name") in names_ or mount.get("mountPath") in paths:
                    return str(mount.get("name"))
    return ""


def _group_params(
    label: str, params: dict[str, str] | None, resources: dict[str, str] | None, labels: dict[str, str] | None
) -> str:
    params = params or {}
    if resources:
        for key in _RESOURCE_PARAMS:
            if key in params:
                return message_for("resources-conflict", group=label, key=key)
    if "labels" in params:
        return message_for("labels-param", group=label)
    for key, value in (labels or {}).items():
        if not valid_label_key(key):
            return message_for("label-key", group=label, key=key)
        if not valid_label_value(value):
            return message_for("label-value", group=label, key=key, value=value)
    return ""


def _replica_bounds(group: WorkerGroupSpec, raw: dict[str, object], autoscaling: bool) -> str:
    g = group.group_name
    if not autoscaling and ("minReplicas" not in raw or "maxReplicas" not in raw):
        return message_for("min-max-required", group=g)
    if group.min_replicas < 0:
        return message_for("min-negative", group=g, n=group.min_replicas)
    if group.max_replicas < 0:
        return message_for("max-negative", group=g, n=group.max_replicas)
    if group.min_replicas > group.max_replicas:
        return message_for("min-gt-max", group=g, min=group.min_replicas, max=group.max_replicas)
    return ""


@by_identity()
def validate_spec(view: ClusterView, config: OperatorConfig) -> str:
    """``ValidateRayClusterSpec`` (docs/behaviour.md#8), first failure wins; "" when valid."""
    spec = view.spec
    head = spec.head_group_spec
    groups = spec.worker_group_specs or ()
    raw_groups = view.raw_spec.get("workerGroupSpecs")
    raw_list = raw_groups if isinstance(raw_groups, list) else []
    if problem := shape.template_problem(head.template, "headGroupSpec.template"):
        return problem
    if problem := shape.service_problem(head.head_service, "headGroupSpec.headService"):
        return problem
    if model.ray_container(head.template) is None:
        return message_for("head-no-container")
    for group in groups:
        if problem := shape.template_problem(group.template, f"workerGroupSpecs[{group.group_name}].template"):
            return problem
        if model.ray_container(group.template) is None:
            return message_for("worker-no-container", group=group.group_name)
    autoscaling = model.autoscaling_enabled(spec)
    for i, group in enumerate(groups):
        raw = raw_list[i] if i < len(raw_list) and isinstance(raw_list[i], dict) else {}
        if problem := _replica_bounds(group, raw, autoscaling):
            return problem
    checks = [("headGroupSpec", head.ray_start_params, head.resources, head.labels)]
    checks.extend((f"worker group {g.group_name}", g.ray_start_params, g.resources, g.labels) for g in groups)
    for label, params, resources, labels in checks:
        if problem := _group_params(label, params, resources, labels):
            return problem
    v2 = model.autoscaler_v2(spec)
    for group in groups:
        if group.idle_timeout_seconds is not None:
            if group.idle_timeout_seconds < 0:
                return message_for("idle-negative", group=group.group_name, n=group.idle_timeout_seconds)
            if not v2:
                return message_for("idle-needs-v2", group=group.group_name)
        if group.priority != 0 and not (model.version_at_least(spec.ray_version, (2, 56, 0)) and v2):
            return message_for("priority", group=group.group_name)
    if problem := _validate_gcs(view, config):
        return problem
    if problem := _validate_autoscaling(view, config):
        return problem
    return _validate_options(view, config)


def _validate_gcs(view: ClusterView, config: OperatorConfig) -> str:
    spec = view.spec
    head = spec.head_group_spec
    options = spec.gcs_fault_tolerance_options
    head_env = _env_names(head.template)
    params = head.ray_start_params or {}
    if options is not None and conventions.ANN_FT_ENABLED in view.annotations:
        return message_for("ft-both")
    if "RAY_REDIS_ADDRESS" in head_env and not model.gcs_ft_enabled(view):
        return message_for("redis-address-no-ft")
    if options is not None:
        if "redis-password" in params:
            return message_for("ft-redis-password-param")
        if "REDIS_PASSWORD" in head_env:
            return message_for("ft-redis-password-env")
        if "RAY_REDIS_ADDRESS" in head_env:
            return message_for("ft-redis-address-env")
        if conventions.ANN_EXTERNAL_STORAGE_NS in view.annotations:
            return message_for("ft-storage-ns-annotation")
        if options.backend == "rocksdb":
            if not config.gates.gcs_fault_tolerance_embedded_storage:
                return message_for("rocksdb-gate")
            redis_fields: tuple[tuple[str, object], ...] = (
                ("redisAddress", options.redis_address),
                ("redisUsername", options.redis_username),
                ("redisPassword", options.redis_password),
                ("externalStorageNamespace", options.external_storage_namespace),
            )
            for field, value in redis_fields:
                if value:
                    return message_for("rocksdb-redis-fields", field=field)
            storage = options.storage
            if storage is not None and storage.claim_name:
                claim_fields: tuple[tuple[str, object], ...] = (
                    ("size", storage.size),
                    ("storageClassName", storage.storage_class_name),
                    ("accessModes", storage.access_modes),
                )
                for field, value in claim_fields:
                    if value:
                        return message_for("rocksdb-claim", field=field)
            for _, template in _templates(spec):
                for env in ("RAY_gcs_storage", "RAY_gcs_storage_path"):
                    if env in _env_names(template):
                        return message_for("rocksdb-env", env=env)
            if what := _mount_problem(spec, names_=("gcs-storage",), paths=("/data/gcs",)):
                return message_for("rocksdb-volume", what=what)
        elif options.storage is not None:
            return message_for("redis-storage")
    if "redis-username" in params or "REDIS_USERNAME" in head_env:
        return message_for("redis-username")
    return ""


def _validate_autoscaling(view: ClusterView, config: OperatorConfig) -> str:
    spec = view.spec
    head = spec.head_group_spec
    groups = spec.worker_group_specs or ()
    for group in groups:
        if group.suspend and not config.gates.ray_job_deletion_policy:
            return message_for("group-suspend-gate", group=group.group_name)
    autoscaling = model.autoscaling_enabled(spec)
    if not autoscaling and model.head_env_enables_v2(spec):
        return message_for("v2-env-no-autoscaling")
    if autoscaling:
        for group in groups:
            if group.suspend:
                return message_for("autoscaling-group-suspend", group=group.group_name)
        options = spec.autoscaler_options
        if (
            options is not None
            and options.version is not None
            and model.container_env_value(head.template, "RAY_enable_autoscaler_v2") is not None
        ):
            return message_for("v2-both")
        if model.autoscaler_v2(spec):
            if _restart_policy(head.template) not in ("", "Never"):
                return message_for("v2-restart-head", policy=_restart_policy(head.template))
            for group in groups:
                if _restart_policy(group.template) not in ("", "Never"):
                    return message_for(
                        "v2-restart-worker", group=group.group_name, policy=_restart_policy(group.template)
                    )
    options = spec.autoscaler_options
    if options is not None:
        if options.idle_timeout_seconds is not None and options.idle_timeout_seconds < 0:
            return message_for("autoscaler-idle-negative", n=options.idle_timeout_seconds)
        if any(e.get("name") == "KUBERAY_GEN_AUTOSCALER_START_CMD" for e in options.env or ()):
            return message_for("autoscaler-env")
    return ""


def _validate_options(view: ClusterView, config: OperatorConfig) -> str:
    """The optional features, in docs/behaviour.md#8 order: history server, auth, network policy, TLS."""
    for check in (_validate_history_server, _validate_auth, _validate_network_policy, _validate_tls):
        if problem := check(view.spec, config):
            return problem
    return ""


def _validate_history_server(spec: RayClusterSpec, config: OperatorConfig) -> str:
    history = spec.history_server_options
    if history is None:
        return ""
    if not config.gates.ray_cluster_history_server:
        return message_for("history-gate")
    collector = history.collector_options
    if collector is None:
        return message_for("history-collector")
    if not collector.image:
        return message_for("history-image")
    env_names = {e.get("name") for e in collector.env or ()}
    for env in _HISTORY_FORBIDDEN_ENV:
        if env in env_names:
            return message_for("history-env", env=env)
    if "STORAGE_BACKEND" not in env_names:
        return message_for("history-backend")
    for _, template in _templates(spec):
        pod_spec = template.get("spec")
        containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
        if any(isinstance(c, dict) and c.get("name") == "ray-history-collector" for c in containers or []):
            return message_for("history-container")
    return ""


def _validate_auth(spec: RayClusterSpec, _config: OperatorConfig) -> str:
    auth = spec.auth_options
    if auth is None:
        return ""
    if auth.mode == "token" and not model.version_at_least(spec.ray_version, (2, 52, 0)):
        return message_for("auth-version", version=spec.ray_version)
    if auth.enable_k8s_token_auth:
        if auth.mode != "token":
            return message_for("k8s-auth-mode")
        if not model.version_at_least(spec.ray_version, (2, 55, 0)):
            return message_for("k8s-auth-version", version=spec.ray_version)
        if auth.secret_name:
            return message_for("k8s-auth-secret")
    return ""


def _validate_network_policy(spec: RayClusterSpec, config: OperatorConfig) -> str:
    policy = spec.network_policy
    if policy is None:
        return ""
    if not config.gates.ray_cluster_network_policy:
        return message_for("netpol-gate")
    group_names = {g.group_name for g in spec.worker_group_specs or ()}
    rules: list[tuple[str, NetworkPolicyRules | WorkerGroupNetworkPolicy | None]] = [
        ("head", policy.head),
        ("worker", policy.worker),
    ]
    rules.extend((f"workerGroups[{w.group_name}]", w) for w in policy.worker_groups or ())
    for where, rule in rules:
        if rule is None:
            continue
        if rule.ingress_rules and policy.mode == "DenyAllEgress":
            return message_for("netpol-ingress", where=where)
        if rule.egress_rules and policy.mode == "DenyAllIngress":
            return message_for("netpol-egress", where=where)
    for entry in policy.worker_groups or ():
        if not _DNS1123.match(entry.group_name):
            return message_for("netpol-group-name", group=entry.group_name)
        if entry.group_name not in group_names:
            return message_for("netpol-group-missing", group=entry.group_name)
    return ""


def _validate_tls(spec: RayClusterSpec, config: OperatorConfig) -> str:
    tls = spec.tls_options
    if tls is None:
        return ""
    if not config.gates.ray_cluster_mtls:
        return message_for("tls-gate")
    if tls.enabled:
        for _, template in _templates(spec):
            for env in _env_names(template):
                if env in _TLS_ENV or env.startswith("RAY_TLS_"):
                    return message_for("tls-env", env=env)
        if what := _mount_problem(spec, names_=("ray-tls",), paths=("/etc/ray/tls",)):
            return message_for("tls-volume", what=what)
    return ""


__all__ = ["MESSAGES", "valid_label_key", "valid_label_value", "validate_metadata", "validate_spec"]
