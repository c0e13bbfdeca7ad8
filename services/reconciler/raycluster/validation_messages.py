"""The texts of every RayCluster validation failure (docs/behaviour.md#8), in one place.

Role: message templates keyed by a short rule id; ``validation`` fills them in. raybus's own wording,
modelled on KubeRay's messages (the Go source was not available when these were written); each names
the field involved and, where there is one, the field to use instead.

Not here: the rules themselves (``validation``).
"""

from __future__ import annotations

from typing import Final

MESSAGES: Final = {
    "name-too-long": "RayCluster name should be no more than {max} characters, got {n}",
    "name-dns1035": "RayCluster name should be a valid DNS-1035 label: {name!r}",
    "head-no-container": "headGroupSpec should have at least one container",
    "worker-no-container": "workerGroupSpec {group} should have at least one container",
    "min-max-required": "worker group {group}: minReplicas and maxReplicas must be set when autoscaling is disabled",
    "min-negative": "worker group {group}: minReplicas ({n}) must be greater than or equal to 0",
    "max-negative": "worker group {group}: maxReplicas ({n}) must be greater than or equal to 0",
    "min-gt-max": "worker group {group}: minReplicas ({min}) must be less than or equal to maxReplicas ({max})",
    "resources-conflict": (
        "{group}: rayStartParams[{key!r}] cannot be set together with the group's resources field; "
        "use resources only"
    ),
    "labels-param": "{group}: rayStartParams['labels'] is not allowed; use the group's labels field",
    "label-key": "{group}: invalid label key {key!r} in labels",
    "label-value": "{group}: invalid label value {value!r} for key {key!r} in labels",
    "idle-negative": "worker group {group}: idleTimeoutSeconds ({n}) must be greater than or equal to 0",
    "idle-needs-v2": (
        "worker group {group}: idleTimeoutSeconds is only supported by autoscaler v2 "
        "(autoscalerOptions.version: v2 or head env RAY_enable_autoscaler_v2=true)"
    ),
    "priority": "worker group {group}: priority requires rayVersion >= 2.56.0 and autoscaler v2",
    "ft-both": (
        "the ray.io/ft-enabled annotation and gcsFaultToleranceOptions cannot both be set; "
        "use gcsFaultToleranceOptions only"
    ),
    "redis-address-no-ft": (
        "head env RAY_REDIS_ADDRESS is set but GCS fault tolerance is not enabled; set gcsFaultToleranceOptions"
    ),
    "ft-redis-password-param": (
        "rayStartParams['redis-password'] cannot be set when gcsFaultToleranceOptions is set; "
        "use gcsFaultToleranceOptions.redisPassword"
    ),
    "ft-redis-password-env": (
        "head env REDIS_PASSWORD cannot be set when gcsFaultToleranceOptions is set; "
        "use gcsFaultToleranceOptions.redisPassword"
    ),
    "ft-redis-address-env": (
        "head env RAY_REDIS_ADDRESS cannot be set when gcsFaultToleranceOptions is set; "
        "use gcsFaultToleranceOptions.redisAddress"
    ),
    "ft-storage-ns-annotation": (
        "the ray.io/external-storage-namespace annotation cannot be set when gcsFaultToleranceOptions is set; "
        "use gcsFaultToleranceOptions.externalStorageNamespace"
    ),
    "rocksdb-gate": (
        "gcsFaultToleranceOptions.backend rocksdb requires the GCSFaultToleranceEmbeddedStorage feature gate"
    ),
    "rocksdb-redis-fields": "gcsFaultToleranceOptions.backend rocksdb cannot be used with Redis fields ({field})",
    "rocksdb-claim": "gcsFaultToleranceOptions.storage.claimName cannot be set together with {field}",
    "rocksdb-env": "env {env} is managed by the operator for the rocksdb GCS backend and cannot be set",
    "rocksdb-volume": "volume or volumeMount {what!r} is reserved for the rocksdb GCS backend",
    "redis-storage": "gcsFaultToleranceOptions.storage is only supported with backend rocksdb",
    "redis-username": (
        "rayStartParams['redis-username'] and head env REDIS_USERNAME are not supported; "
        "use gcsFaultToleranceOptions.redisUsername"
    ),
    "group-suspend-gate": "worker group {group}: suspend requires the RayJobDeletionPolicy feature gate",
    "v2-env-no-autoscaling": "head env RAY_enable_autoscaler_v2 is set but enableInTreeAutoscaling is not true",
    "autoscaling-group-suspend": (
        "worker group {group}: suspending worker groups is not supported with autoscaling enabled"
    ),
    "v2-both": (
        "autoscalerOptions.version and head env RAY_enable_autoscaler_v2 cannot both be set; "
        "use autoscalerOptions.version"
    ),
    "v2-restart-head": "restartPolicy of the head Pod must be Never or unset with autoscaler v2, got {policy!r}",
    "v2-restart-worker": (
        "restartPolicy of worker group {group} must be Never or unset with autoscaler v2, got {policy!r}"
    ),
    "autoscaler-idle-negative": "autoscalerOptions.idleTimeoutSeconds ({n}) must be greater than or equal to 0",
    "autoscaler-env": "autoscalerOptions.env cannot set KUBERAY_GEN_AUTOSCALER_START_CMD",
    "history-gate": "historyServerOptions requires the RayClusterHistoryServer feature gate",
    "history-collector": "historyServerOptions.collectorOptions must be set",
    "history-image": "historyServerOptions.collectorOptions.image must be set",
    "history-env": "historyServerOptions.collectorOptions.env cannot set {env}",
    "history-backend": "historyServerOptions.collectorOptions.env must set STORAGE_BACKEND",
    "history-container": "the container name ray-history-collector is reserved for the history-server collector",
    "auth-version": "authOptions.mode token requires rayVersion >= 2.52.0, got {version!r}",
    "k8s-auth-version": "authOptions.enableK8sTokenAuth requires rayVersion >= 2.55.0, got {version!r}",
    "k8s-auth-secret": "authOptions.enableK8sTokenAuth cannot be used together with authOptions.secretName",
    "k8s-auth-mode": "authOptions.enableK8sTokenAuth requires authOptions.mode token",
    "netpol-gate": "networkPolicy requires the RayClusterNetworkPolicy feature gate",
    "netpol-ingress": "networkPolicy.{where}: ingressRules cannot be set with mode DenyAllEgress",
    "netpol-egress": "networkPolicy.{where}: egressRules cannot be set with mode DenyAllIngress",
    "netpol-group-name": "networkPolicy.workerGroups: group name {group!r} must be a DNS-1123 label",
    "netpol-group-missing": "networkPolicy.workerGroups: group {group!r} is not a worker group of this RayCluster",
    "tls-gate": "tlsOptions requires the RayClusterMTLS feature gate",
    "tls-env": "env {env} is managed by the operator when tlsOptions is enabled",
    "tls-volume": "volume or volumeMount {what!r} is reserved for mTLS",
}


def message_for(message_id: str, /, **values: object) -> str:
    """The message of rule ``message_id`` with its placeholders filled in."""
    return MESSAGES[message_id].format(**values)
