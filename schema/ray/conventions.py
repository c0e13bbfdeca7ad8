"""KubeRay's well-known names: API versions, label and annotation keys, finalizers, ports, name rules.

Role: the one place that spells them (docs/behaviour.md#2 and #3.1). They are interface facts: a user's
manifests, KubeRay's dashboards and tools such as ``kubectl get -l ray.io/cluster=...`` depend on them
being exactly KubeRay's, so they are copied, never invented.

Invariants: constants and two pure functions only; nothing here reads an object.
"""

from __future__ import annotations

import string
from typing import Final

GROUP: Final = "ray.io"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
GATEWAY_GROUP: Final = "gateway.networking.k8s.io"
GATEWAY_VERSION: Final = "v1"
GATEWAY_API_VERSION: Final = f"{GATEWAY_GROUP}/{GATEWAY_VERSION}"

# Label keys (docs/behaviour.md#2.2).
LABEL_CLUSTER: Final = "ray.io/cluster"
LABEL_NODE_TYPE: Final = "ray.io/node-type"
LABEL_GROUP: Final = "ray.io/group"
LABEL_IDENTIFIER: Final = "ray.io/identifier"
LABEL_IS_RAY_NODE: Final = "ray.io/is-ray-node"
LABEL_APP_NAME: Final = "app.kubernetes.io/name"
LABEL_CREATED_BY: Final = "app.kubernetes.io/created-by"
LABEL_SERVE: Final = "ray.io/serve"
LABEL_HEADLESS_SVC: Final = "ray.io/headless-worker-svc"
LABEL_ORIGIN_NAME: Final = "ray.io/originated-from-cr-name"
LABEL_ORIGIN_CRD: Final = "ray.io/originated-from-crd"
LABEL_REPLICA_INDEX: Final = "ray.io/worker-group-replica-index"
LABEL_REPLICA_NAME: Final = "ray.io/worker-group-replica-name"
LABEL_HOST_INDEX: Final = "ray.io/replica-host-index"
LABEL_JOB_SUBMISSION_MODE: Final = "ray.io/job-submission-mode"
LABEL_CRONJOB_NAME: Final = "ray.io/cronjob-name"
LABEL_SERVICE_NAME: Final = "kubernetes.io/service-name"
"""Kubernetes' label tying an EndpointSlice to its Service."""

# Label values.
APP_NAME: Final = "kuberay"
CREATED_BY: Final = "kuberay-operator"
NODE_HEAD: Final = "head"
NODE_WORKER: Final = "worker"
NODE_REDIS_CLEANUP: Final = "redis-cleanup"
HEAD_GROUP: Final = "headgroup"

# Annotation keys (docs/behaviour.md#2.3).
ANN_FT_ENABLED: Final = "ray.io/ft-enabled"
ANN_EXTERNAL_STORAGE_NS: Final = "ray.io/external-storage-namespace"
ANN_OVERWRITE_CMD: Final = "ray.io/overwrite-container-cmd"
ANN_ENABLE_SERVE_SERVICE: Final = "ray.io/enable-serve-service"
ANN_DISABLE_HEAD_RESTART: Final = "ray.io/disable-provisioned-head-restart"
ANN_GCS_FT_DELETION_TIMEOUT: Final = "ray.io/gcs-ft-deletion-timeout"
ANN_RECREATE_HASH: Final = "ray.io/upgrade-strategy-recreate-hash"
ANN_KUBERAY_VERSION: Final = "ray.io/kuberay-version"
ANN_SPEC_HASH: Final = "ray.io/hash-without-replicas-and-workers-to-delete"
ANN_NUM_WORKER_GROUPS: Final = "ray.io/num-worker-groups"
ANN_INITIALIZING_TIMEOUT: Final = "ray.io/initializing-timeout"
ANN_CRONJOB_SCHEDULED_TIMESTAMP: Final = "ray.io/cronjob-scheduled-timestamp"
ANN_INGRESS_CLASS: Final = "kubernetes.io/ingress.class"

# Finalizers (docs/behaviour.md#2.5).
FINALIZER_GCS_FT: Final = "ray.io/gcs-ft-redis-cleanup-finalizer"
FINALIZER_RAYJOB: Final = "ray.io/rayjob-finalizer"
FINALIZER_RAYSERVICE: Final = "ray.io/rayservice-finalizer"

# The key of the auth token in a token-auth Secret (docs/behaviour.md#4.1).
AUTH_TOKEN_SECRET_KEY: Final = "auth_token"

# spec.managedBy values.
MANAGED_BY_KUBERAY: Final = "ray.io/kuberay-operator"
MANAGED_BY_MULTIKUEUE: Final = "kueue.x-k8s.io/multikueue"

# Ray's ports: names on the head container and Services, and their defaults (docs/behaviour.md#3.1).
PORT_CLIENT: Final = "client"
PORT_GCS: Final = "gcs-server"
PORT_DASHBOARD: Final = "dashboard"
PORT_METRICS: Final = "metrics"
PORT_SERVE: Final = "serve"
PORT_DASHBOARD_AGENT: Final = "dashboard-agent"
DEFAULT_CLIENT_PORT: Final = 10001
DEFAULT_GCS_PORT: Final = 6379
DEFAULT_DASHBOARD_PORT: Final = 8265
DEFAULT_METRICS_PORT: Final = 8080
DEFAULT_SERVE_PORT: Final = 8000
DEFAULT_DASHBOARD_AGENT_PORT: Final = 52365
"""The dashboard agent's listen port (health checks, Serve's proxy health), on every Ray node."""
DEFAULT_PORTS: Final = {
    PORT_CLIENT: DEFAULT_CLIENT_PORT,
    PORT_GCS: DEFAULT_GCS_PORT,
    PORT_DASHBOARD: DEFAULT_DASHBOARD_PORT,
    PORT_METRICS: DEFAULT_METRICS_PORT,
    PORT_SERVE: DEFAULT_SERVE_PORT,
}
"""The head Service's ports, in KubeRay's order."""

_PUNCTUATION: Final = frozenset(string.punctuation)


def check_name(name: str) -> str:
    """KubeRay's ``CheckName`` (ray-operator/controllers/ray/utils/util.go): keep the last 50 characters;
    a leading digit or punctuation becomes ``r``."""
    if len(name) > 50:
        name = name[-50:]
    if name and (name[0].isdigit() or name[0] in _PUNCTUATION):
        name = "r" + name[1:]
    return name


def check_label(value: str) -> str:
    """KubeRay's ``CheckLabel`` (same file): keep the last 63 characters; a leading punctuation becomes ``r``."""
    if len(value) > 63:
        value = value[-63:]
    if value and value[0] in _PUNCTUATION:
        value = "r" + value[1:]
    return value
