"""Environment variables of the Ray container (docs/behaviour.md#3.4, #3.8, #3.9, auth).

Role: append KubeRay's env vars to the Ray container in docs/behaviour.md#3.4 order: operator defaults, the
worker's head address, the cluster identity fields, ``KUBERAY_GEN_RAY_START_CMD``, ports/addresses,
usage-stats tags, then the feature-specific ones (GCS FT, autoscaler version, token auth).

Invariants: "(if absent)" variables never override a user value; the others are always appended (as
KubeRay does, even when the user set the same name).

Not here: init containers' env (``pod_bodies``), the autoscaler sidecar's env (``containers``).
"""

from __future__ import annotations

from typing import Any, Final

from schema.config import OperatorConfig
from schema.ray import conventions
from services.reconciler.raycluster import containers, model
from services.reconciler.raycluster.model import ClusterView

GCS_PATH: Final = "/data/gcs"
"""Where the rocksdb GCS backend keeps its data (mount path of the ``gcs-storage`` volume)."""


def env_has(env: list[dict[str, Any]], name: str) -> bool:
    """True when ``env`` already defines ``name``."""
    return any(item.get("name") == name for item in env)


def add_if_absent(env: list[dict[str, Any]], name: str, value: str) -> None:
    if not env_has(env, name):
        env.append({"name": name, "value": value})


def credential_env(name: str, credential: Any) -> dict[str, Any] | None:
    if credential is None:
        return None
    if credential.value_from is not None:
        return {"name": name, "valueFrom": dict(credential.value_from)}
    if credential.value is not None:
        return {"name": name, "value": credential.value}
    return None


def add_feature_env(view: ClusterView, env: list[dict[str, Any]], *, head: bool, params: dict[str, str]) -> None:
    """docs/behaviour.md#3.4 step 10: GCS FT, autoscaler and auth env vars."""
    spec = view.spec
    backend = model.gcs_backend(view)
    if backend is not None and not head:
        add_if_absent(env, "RAY_gcs_rpc_server_reconnect_timeout_s", "600")
    if backend == "redis" and head:
        options = spec.gcs_fault_tolerance_options
        add_if_absent(env, "RAY_external_storage_namespace", storage_namespace(view))
        if options is not None:
            if options.redis_address:
                env.append({"name": "RAY_REDIS_ADDRESS", "value": options.redis_address})
            for name, credential in (
                ("REDIS_USERNAME", options.redis_username),
                ("REDIS_PASSWORD", options.redis_password),
            ):
                item = credential_env(name, credential)
                if item is not None:
                    env.append(item)
        elif "redis-password" in params:
            add_if_absent(env, "REDIS_PASSWORD", params["redis-password"])
    if backend == "rocksdb" and head:
        env.append({"name": "RAY_gcs_storage", "value": "rocksdb"})
        env.append({"name": "RAY_gcs_storage_path", "value": GCS_PATH})
    version = model.autoscaler_version(spec)
    if head and model.autoscaling_enabled(spec) and version is not None:
        env.append({"name": "RAY_enable_autoscaler_v2", "value": "true" if version == "v2" else "false"})
    if model.token_auth_enabled(spec):
        env.append({"name": "RAY_AUTH_MODE", "value": "token"})
        if model.k8s_token_auth_enabled(spec):
            env.append({"name": "RAY_ENABLE_K8S_TOKEN_AUTH", "value": "true"})
        else:
            env.append(
                {
                    "name": "RAY_AUTH_TOKEN",
                    "valueFrom": {
                        "secretKeyRef": {"name": model.auth_secret(view), "key": conventions.AUTH_TOKEN_SECRET_KEY}
                    },
                }
            )


def storage_namespace(view: ClusterView) -> str:
    """The Redis storage namespace: options, else the legacy annotation, else the cluster UID."""
    options = view.spec.gcs_fault_tolerance_options
    if options is not None and options.external_storage_namespace:
        return options.external_storage_namespace
    return view.annotations.get(conventions.ANN_EXTERNAL_STORAGE_NS) or view.uid


def add_container_env(
    view: ClusterView,
    config: OperatorConfig,
    container: dict[str, Any],
    *,
    head: bool,
    fqdn: str,
    ray_start: str,
    params: dict[str, str],
) -> None:
    """docs/behaviour.md#3.4 in order."""
    raw_env = container.get("env")
    env: list[dict[str, Any]] = raw_env if isinstance(raw_env, list) else []
    container["env"] = env
    for default in config.pod_defaults.default_container_envs:
        if not env_has(env, str(default.get("name", ""))):
            env.append(dict(default))
    if not head:
        env.append({"name": "FQ_RAY_IP", "value": fqdn})
        env.append({"name": "RAY_IP", "value": fqdn.split(".")[0]})
    env.append(containers.field_env("RAY_CLUSTER_NAME", "metadata.labels['ray.io/cluster']"))
    env.append(containers.field_env("RAY_CLUSTER_NAMESPACE", "metadata.namespace"))
    env.append(containers.field_env("RAY_CLOUD_INSTANCE_ID", "metadata.name"))
    env.append(containers.field_env("RAY_NODE_TYPE_NAME", "metadata.labels['ray.io/group']"))
    env.append({"name": "KUBERAY_GEN_RAY_START_CMD", "value": ray_start})
    port = model.head_port(view.spec)
    add_if_absent(env, "RAY_PORT", port)
    crd = model.creator_crd(view)
    if crd == "RayService":
        add_if_absent(env, "RAY_timeout_ms_task_wait_for_death_info", "0")
        add_if_absent(env, "RAY_gcs_server_request_timeout_seconds", "5")
        add_if_absent(env, "RAY_SERVE_KV_TIMEOUT_S", "5")
    add_if_absent(env, "RAY_ADDRESS", f"127.0.0.1:{port}" if head else f"{fqdn}:{port}")
    add_if_absent(env, "RAY_USAGE_STATS_KUBERAY_IN_USE", "1")
    if head:
        env.append(
            {"name": "RAY_USAGE_STATS_EXTRA_TAGS", "value": f"kuberay_version={config.version};kuberay_crd={crd}"}
        )
    add_if_absent(env, "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "1")
    add_feature_env(view, env, head=head, params=params)
