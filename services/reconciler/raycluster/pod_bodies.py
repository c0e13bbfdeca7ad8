"""Head and worker Pod bodies (docs/behaviour.md#3): labels, annotations, rayStartParams, command, env, volumes,
probes, the autoscaler sidecar and the workers' init container.

Role: ``head_pod`` / ``worker_pod`` return the exact Pod KubeRay would create for a RayCluster, with a
deterministic ``metadata.name`` instead of ``generateName``. RayJob/RayService code reuses these through
a :class:`~services.reconciler.raycluster.model.ClusterView` of the cluster it creates.

Invariants:
- The user's template is never mutated: it is deep-copied first (msgspec round trip).
- Env vars are added in docs/behaviour.md#3.4 order; "(if absent)" ones never override a user value.
- ``worker_pod_base`` builds everything except the pod's identity, so creating many pods of one group
  costs one build plus a cheap :func:`with_identity` per pod.

Not here: which pods to create (``reconcile_pods``), the head Service (``services``).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from schema.config import OperatorConfig
from schema.messages import ObjectRef
from schema.ray import RayClusterSpec, WorkerGroupSpec, conventions
from schema.ray.conventions import check_name
from services.reconciler.common.memo import by_identity
from services.reconciler.common.owners import owner_reference
from services.reconciler.raycluster import containers, env, model, names, rayparams
from services.reconciler.raycluster.model import ClusterView
from services.reconciler.raycluster.quantity import try_parse_quantity

SHM_VOLUME: Final = "shared-mem"
SHM_PATH: Final = "/dev/shm"
LOG_VOLUME: Final = "ray-logs"
LOG_PATH: Final = "/tmp/ray"
GCS_VOLUME: Final = "gcs-storage"
GCS_PATH: Final = env.GCS_PATH
TOKEN_VOLUME: Final = "ray-token"
TOKEN_PATH: Final = "/var/run/secrets/ray.io/serviceaccount"
PROTECTED_LABELS: Final = frozenset({conventions.LABEL_CLUSTER, conventions.LABEL_NODE_TYPE, conventions.LABEL_GROUP})

_json_encoder: Final = msgspec.json.Encoder()
_json_decoder: Final = msgspec.json.Decoder()


def deep_copy(value: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a JSON-shaped dict."""
    copied: dict[str, Any] = _json_decoder.decode(_json_encoder.encode(value))
    return copied


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str_map(value: object) -> dict[str, str]:
    return {k: str(v) for k, v in value.items() if isinstance(k, str)} if isinstance(value, dict) else {}


def pod_labels(
    *,
    cluster: str,
    node_type: str,
    group: str,
    template_labels: dict[str, str],
    group_labels: dict[str, str],
) -> dict[str, str]:
    """KubeRay's pod labels: defaults, then template labels, then group ``labels`` (docs/behaviour.md#2.2)."""
    labels = {
        conventions.LABEL_IS_RAY_NODE: "yes",
        conventions.LABEL_CLUSTER: cluster,
        conventions.LABEL_NODE_TYPE: node_type,
        conventions.LABEL_GROUP: group,
        conventions.LABEL_IDENTIFIER: names.identifier(cluster, node_type),
        conventions.LABEL_APP_NAME: conventions.APP_NAME,
        conventions.LABEL_CREATED_BY: conventions.CREATED_BY,
    }
    for source in (template_labels, group_labels):
        for key, value in source.items():
            if key not in PROTECTED_LABELS:
                labels[key] = value
    return labels


def _add_empty_dir(
    pod_spec: dict[str, Any], container: dict[str, Any], *, volume: str, path: str, size_limit: str | None, memory: bool
) -> None:
    mounts: list[dict[str, Any]] = container.setdefault("volumeMounts", [])
    if any(isinstance(m, dict) and m.get("mountPath") == path for m in mounts):
        return
    volumes: list[dict[str, Any]] = pod_spec.setdefault("volumes", [])
    if not any(isinstance(v, dict) and v.get("name") == volume for v in volumes):
        empty_dir: dict[str, Any] = {}
        if memory:
            empty_dir["medium"] = "Memory"
            if size_limit is not None:
                empty_dir["sizeLimit"] = size_limit
        volumes.append({"name": volume, "emptyDir": empty_dir})
    mounts.append({"mountPath": path, "name": volume})


def _shm_size_limit(container: dict[str, Any]) -> str | None:
    resources = _dict(container.get("resources"))
    for section in ("limits", "requests"):
        raw = _dict(resources.get(section)).get("memory")
        if raw is not None and try_parse_quantity(raw) is not None:
            return str(raw)
    return None


def _wrap_command(container: dict[str, Any], *, ray_start: str, overwrite: bool, login_shell: bool) -> None:
    user = "".join(f" {tok} " for tok in container.get("command") or [])
    user += "".join(f" {tok} " for tok in container.get("args") or [])
    if overwrite or "ray start" in user:
        return
    full = f"ulimit -n ${{RAY_START_ULIMIT_OPEN_FILES:-65536}}; {ray_start}"
    container["command"] = containers.shell_command(login_shell=login_shell)
    container["args"] = [f"{user} && {full}" if user else full]


def _port_by_name(container: dict[str, Any], name: str) -> int | None:
    for port in container.get("ports") or []:
        if isinstance(port, dict) and port.get("name") == name:
            value = port.get("containerPort")
            return value if isinstance(value, int) else None
    return None


def _int_param(params: dict[str, str], key: str, default: int) -> int:
    try:
        return int(params.get(key, default))
    except ValueError:
        return default


def _pod_skeleton(
    view: ClusterView,
    config: OperatorConfig,
    *,
    head: bool,
    template: dict[str, Any],
    group: str,
    group_labels: dict[str, str],
) -> dict[str, Any]:
    meta = _dict(template.get("metadata"))
    labels = pod_labels(
        cluster=view.name,
        node_type=conventions.NODE_HEAD if head else conventions.NODE_WORKER,
        group=group,
        template_labels=_str_map(meta.get("labels")),
        group_labels=group_labels,
    )
    if model.serve_labels_enabled(view):
        labels[conventions.LABEL_SERVE] = "false" if head else "true"
    for key, value in config.pod_defaults.default_pod_labels.items():
        labels.setdefault(key, value)
    annotations = _str_map(meta.get("annotations"))
    overwrite = view.annotations.get(conventions.ANN_OVERWRITE_CMD, "")
    if overwrite:
        annotations[conventions.ANN_OVERWRITE_CMD] = overwrite
    metadata: dict[str, Any] = {
        k: v for k, v in meta.items() if k not in ("name", "generateName", "namespace", "labels", "annotations")
    }
    metadata.update(namespace=view.namespace, labels=labels, annotations=annotations)
    spec = _dict(template.get("spec"))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _finish_pod(
    view: ClusterView,
    config: OperatorConfig,
    pod: dict[str, Any],
    *,
    head: bool,
    params: dict[str, str],
    user_container: dict[str, Any],
) -> None:
    """BuildPod: volumes, command, env, probes; shared by head and workers."""
    spec = pod["spec"]
    container: dict[str, Any] = spec["containers"][0]
    fqdn = model.head_fqdn(view, config)
    autoscaling = model.autoscaling_enabled(view.spec)
    if "plasma-directory" not in params:
        _add_empty_dir(
            spec, container, volume=SHM_VOLUME, path=SHM_PATH, size_limit=_shm_size_limit(container), memory=True
        )
    if head and autoscaling:
        _add_empty_dir(spec, container, volume=LOG_VOLUME, path=LOG_PATH, size_limit=None, memory=False)
        for sidecar in spec["containers"][1:]:
            if sidecar.get("name") == containers.AUTOSCALER_NAME:
                _add_empty_dir(spec, sidecar, volume=LOG_VOLUME, path=LOG_PATH, size_limit=None, memory=False)
    params = rayparams.add_container_resources(params, container.get("resources"))
    ray_start = rayparams.ray_start_command(params, head=head)
    overwrite = pod["metadata"]["annotations"].get(conventions.ANN_OVERWRITE_CMD, "").lower() == "true"
    _wrap_command(container, ray_start=ray_start, overwrite=overwrite, login_shell=config.switches.enable_login_shell)
    for init in spec.get("initContainers") or []:
        init.setdefault("env", [])
        init["env"].append({"name": "FQ_RAY_IP", "value": fqdn})
        init["env"].append({"name": "RAY_IP", "value": fqdn.split(".")[0]})
    env.add_container_env(view, config, container, head=head, fqdn=fqdn, ray_start=ray_start, params=params)
    if config.switches.enable_probes_injection:
        serve_port: int | None = None
        if model.creator_crd(view) == "RayService":
            serve_port = _port_by_name(user_container, conventions.PORT_SERVE) or conventions.DEFAULT_SERVE_PORT
        dashboard_port = _port_by_name(container, "dashboard") or rayparams.DEFAULT_DASHBOARD_PORT
        containers.inject_probes(
            container,
            head=head,
            http=model.version_at_least(view.spec.ray_version, (2, 53, 0)),
            agent_port=_int_param(params, "dashboard-agent-listen-port", rayparams.DEFAULT_DASHBOARD_AGENT_PORT),
            dashboard_port=dashboard_port,
            serve_port=serve_port,
        )
    for key, value in config.pod_defaults.default_pod_annotations.items():
        pod["metadata"]["annotations"].setdefault(key, value)
    if not pod["metadata"]["annotations"]:
        del pod["metadata"]["annotations"]
    if not container.get("volumeMounts"):
        container.pop("volumeMounts", None)


def _ensure_metrics_port(container: dict[str, Any]) -> None:
    ports = container.get("ports")
    if not isinstance(ports, list):
        ports = []
        container["ports"] = ports
    if not any(isinstance(p, dict) and p.get("name") == "metrics" for p in ports):
        ports.append({"containerPort": rayparams.DEFAULT_METRICS_PORT, "name": "metrics"})


def _add_auth_and_storage_volumes(
    view: ClusterView, spec: dict[str, Any], container: dict[str, Any], *, head: bool
) -> None:
    if model.k8s_token_auth_enabled(view.spec):
        spec.setdefault("volumes", []).append(
            {"name": TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
        )
        container.setdefault("volumeMounts", []).append(
            {"mountPath": TOKEN_PATH, "name": TOKEN_VOLUME, "readOnly": True}
        )
    if head and model.gcs_backend(view) == "rocksdb":
        options = view.spec.gcs_fault_tolerance_options
        storage = options.storage if options is not None else None
        claim = (storage.claim_name if storage is not None else None) or names.gcs_pvc_name(view.name)
        spec.setdefault("volumes", []).append({"name": GCS_VOLUME, "persistentVolumeClaim": {"claimName": claim}})
        mount: dict[str, Any] = {"mountPath": GCS_PATH, "name": GCS_VOLUME}
        if storage is not None and storage.sub_path:
            mount["subPath"] = storage.sub_path
        container.setdefault("volumeMounts", []).append(mount)


def head_start_params(view: ClusterView, config: OperatorConfig) -> dict[str, str]:
    """The head's completed rayStartParams (docs/behaviour.md#3.2 steps 1-7)."""
    spec: RayClusterSpec = view.spec
    head = spec.head_group_spec
    options = spec.gcs_fault_tolerance_options
    redis = model.gcs_backend(view) == "redis" and options is not None
    return rayparams.complete_start_params(
        head.ray_start_params,
        head=True,
        group_resources=head.resources,
        group_labels=head.labels,
        head_address="",
        autoscaling=model.autoscaling_enabled(spec),
        redis_username=redis and options is not None and options.redis_username is not None,
        redis_password=redis and options is not None and options.redis_password is not None,
    )


def head_pod(view: ClusterView, config: OperatorConfig, *, name: str, spec_hash: str) -> dict[str, Any]:
    """The head Pod of a cluster.

    Args:
        view: the cluster.
        config: operator configuration (switches, pod defaults, version).
        name: the pod's deterministic name (``names.head_pod_name``).
        spec_hash: the spec hash for ``ray.io/upgrade-strategy-recreate-hash``.
    """
    spec = view.spec
    template = deep_copy(spec.head_group_spec.template)
    user_container = deep_copy(model.ray_container(spec.head_group_spec.template) or {})
    pod = _pod_skeleton(
        view,
        config,
        head=True,
        template=template,
        group=conventions.HEAD_GROUP,
        group_labels=dict(spec.head_group_spec.labels or {}),
    )
    pod["metadata"]["name"] = name
    annotations = pod["metadata"]["annotations"]
    annotations[conventions.ANN_FT_ENABLED] = "true" if model.gcs_ft_enabled(view) else "false"
    if model.gcs_backend(view) == "redis":
        annotations[conventions.ANN_EXTERNAL_STORAGE_NS] = env.storage_namespace(view)
    annotations[conventions.ANN_RECREATE_HASH] = spec_hash
    annotations[conventions.ANN_KUBERAY_VERSION] = config.version
    pod_spec = pod["spec"]
    params = head_start_params(view, config)
    container = pod_spec["containers"][0]
    if model.autoscaling_enabled(spec):
        sa = pod_spec.get("serviceAccountName") or view.name
        pod_spec["serviceAccountName"] = check_name(str(sa))
        pod_spec["containers"].append(
            containers.autoscaler_container(str(container.get("image", "")), spec.autoscaler_options)
        )
        if model.autoscaler_v2(spec):
            pod_spec["restartPolicy"] = "Never"
    pod_spec["containers"].extend(deep_copy({"c": list(config.pod_defaults.head_sidecar_containers)})["c"])
    _ensure_metrics_port(container)
    _add_auth_and_storage_volumes(view, pod_spec, container, head=True)
    _finish_pod(view, config, pod, head=True, params=params, user_container=user_container)
    pod["metadata"]["ownerReferences"] = [owner_reference_of(view)]
    return pod


def owner_reference_of(view: ClusterView) -> dict[str, Any]:
    """The controller owner reference to the RayCluster of ``view``."""
    return owner_reference(
        ObjectRef(
            api_version=conventions.API_VERSION,
            kind="RayCluster",
            namespace=view.namespace,
            name=view.name,
            uid=view.uid,
        )
    )


def worker_start_params(view: ClusterView, group: WorkerGroupSpec, config: OperatorConfig) -> dict[str, str]:
    """A worker group's completed rayStartParams (docs/behaviour.md#3.2 steps 1-7)."""
    address = f"{model.head_fqdn(view, config)}:{model.head_port(view.spec)}"
    return rayparams.complete_start_params(
        group.ray_start_params,
        head=False,
        group_resources=group.resources,
        group_labels=group.labels,
        head_address=address,
        autoscaling=model.autoscaling_enabled(view.spec),
    )


@by_identity()
def worker_pod_base(view: ClusterView, group: WorkerGroupSpec, config: OperatorConfig) -> dict[str, Any]:
    """A worker Pod of ``group`` without its identity (name and per-pod labels): see ``with_identity``."""
    template = deep_copy(group.template)
    user_container = deep_copy(model.ray_container(group.template) or {})
    pod = _pod_skeleton(
        view, config, head=False, template=template, group=group.group_name, group_labels=dict(group.labels or {})
    )
    pod_spec = pod["spec"]
    container = pod_spec["containers"][0]
    fqdn = model.head_fqdn(view, config)
    address = f"{fqdn}:{model.head_port(view.spec)}"
    if config.switches.enable_init_container_injection:
        pod_spec.setdefault("initContainers", []).append(
            containers.wait_gcs_ready_container(
                user_container, address=address, login_shell=config.switches.enable_login_shell
            )
        )
    if model.autoscaling_enabled(view.spec) and model.autoscaler_v2(view.spec):
        pod_spec["restartPolicy"] = "Never"
    pod_spec["containers"].extend(deep_copy({"c": list(config.pod_defaults.worker_sidecar_containers)})["c"])
    _ensure_metrics_port(container)
    _add_auth_and_storage_volumes(view, pod_spec, container, head=False)
    params = worker_start_params(view, group, config)
    _finish_pod(view, config, pod, head=False, params=params, user_container=user_container)
    pod["metadata"]["ownerReferences"] = [owner_reference_of(view)]
    return pod


def with_identity(base: dict[str, Any], *, name: str, extra_labels: dict[str, str]) -> dict[str, Any]:
    """One pod from a ``worker_pod_base``: its own metadata (name, labels), the spec shared read-only."""
    metadata = dict(base["metadata"])
    metadata["name"] = name
    if extra_labels:
        metadata["labels"] = {**metadata["labels"], **extra_labels}
    return {**base, "metadata": metadata}


def worker_pod(
    view: ClusterView, group: WorkerGroupSpec, config: OperatorConfig, *, name: str, extra_labels: dict[str, str]
) -> dict[str, Any]:
    """One worker Pod of ``group`` (``worker_pod_base`` + ``with_identity``)."""
    return with_identity(worker_pod_base(view, group, config), name=name, extra_labels=extra_labels)
