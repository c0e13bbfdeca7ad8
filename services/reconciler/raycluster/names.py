"""Names, labels and label selectors of everything a RayCluster owns (docs/behaviour.md#2).

Role: one place that spells KubeRay's label/annotation keys and name formats, and derives the names
KubeRay randomises from stable inputs instead, so that replaying a history reproduces every name.

Invariants:
- ``check_name`` / ``check_label`` are KubeRay's CheckName / CheckLabel (docs/behaviour.md#2.1).
- A "random" 5-character suffix is ``stable_suffix(parts...)``: a hash of the cluster UID and the slot
  it stands for, in the alphabet Kubernetes uses for generateName. The same snapshot therefore always
  names the same pods, so a re-issued create is an AlreadyExists (harmless) and never a second pod.

Not here: which slot is free (``podplan``), object bodies (``pods``, ``services``, ...).
"""

from __future__ import annotations

import hashlib
import string
from typing import Final

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
ANN_INGRESS_CLASS: Final = "kubernetes.io/ingress.class"

FINALIZER_GCS_FT: Final = "ray.io/gcs-ft-redis-cleanup-finalizer"
MANAGED_BY_KUBERAY: Final = "ray.io/kuberay-operator"

# Kubernetes' generateName alphabet (no vowels, no confusable digits).
_SUFFIX_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
# byte → alphabet character, so a digest becomes a suffix with one ``bytes.translate``.
_SUFFIX_TABLE: Final = bytes(ord(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)]) for b in range(256))
_PUNCTUATION: Final = frozenset(string.punctuation)


def check_name(name: str) -> str:
    """KubeRay's CheckName: keep the last 50 characters; a leading digit/punctuation becomes ``r``."""
    if len(name) > 50:
        name = name[-50:]
    if name and (name[0].isdigit() or name[0] in _PUNCTUATION):
        name = "r" + name[1:]
    return name


def check_label(value: str) -> str:
    """KubeRay's CheckLabel: keep the last 63 characters; a leading punctuation becomes ``r``."""
    if len(value) > 63:
        value = value[-63:]
    if value and value[0] in _PUNCTUATION:
        value = "r" + value[1:]
    return value


def stable_suffix(*parts: str) -> str:
    """Five generateName-style characters derived from ``parts`` (stands in for KubeRay's rand5)."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return digest[:5].translate(_SUFFIX_TABLE).decode()


def identifier(cluster: str, node_type: str) -> str:
    """The ``ray.io/identifier`` label value: CheckLabel(``<c>-head``) / CheckLabel(``<c>-worker``)."""
    return check_label(f"{cluster}-{node_type}")


def head_pod_prefix(cluster: str) -> str:
    """``<prefix>-head`` where prefix is the first 50 characters of the cluster name, lowercased."""
    return f"{cluster[:50].lower()}-head"


def head_pod_name(cluster: str, uid: str, *, deterministic: bool) -> str:
    """The head pod's name.

    Args:
        cluster: RayCluster name.
        uid: RayCluster UID (the stable input of the suffix).
        deterministic: operator switch ENABLE_DETERMINISTIC_HEAD_POD_NAME (then no suffix at all).
    """
    prefix = head_pod_prefix(cluster)
    if deterministic:
        return prefix
    return f"{prefix}-{stable_suffix(uid, 'head')}"


def worker_pod_prefix(cluster: str, group: str) -> str:
    """``<prefix>-worker`` where prefix is the first 50 characters of ``<c>-<g>``, lowercased."""
    return f"{f'{cluster}-{group}'[:50].lower()}-worker"


def worker_pod_name(cluster: str, uid: str, group: str, slot: int) -> str:
    """The name of the worker pod occupying ``slot`` of a group (single-host groups)."""
    return f"{worker_pod_prefix(cluster, group)}-{stable_suffix(uid, group, str(slot))}"


def multihost_pod_name(cluster: str, uid: str, group: str, replica: str, host_index: int) -> str:
    """The name of host ``host_index`` of multi-host replica ``replica``."""
    return f"{worker_pod_prefix(cluster, group)}-{stable_suffix(uid, group, replica, str(host_index))}"


def replica_group_name(uid: str, group: str, slot: int) -> str:
    """A multi-host replica's name ``<g>-<rand5>`` (rand5 derived from the slot)."""
    return f"{group}-{stable_suffix(uid, group, 'replica', str(slot))}"


def head_service_name(cluster: str, user_service_name: str = "") -> str:
    """``<c>-head-svc``, or the name of the user's ``headGroupSpec.headService``."""
    return user_service_name or f"{cluster}-head-svc"


def headless_service_name(cluster: str) -> str:
    """The headless worker Service of multi-host groups."""
    return f"{cluster}-headless"


def serve_service_name(cluster: str) -> str:
    """The per-cluster serve Service (annotation ``ray.io/enable-serve-service``)."""
    return f"{cluster}-serve-svc"


def ingress_name(cluster: str) -> str:
    """CheckName(``<c>-head-ingress``)."""
    return check_name(f"{cluster}-head-ingress")


def autoscaler_rbac_name(cluster: str) -> str:
    """The autoscaler Role and RoleBinding: CheckName(``<c>``)."""
    return check_name(cluster)


def auth_secret_name(cluster: str) -> str:
    """The operator-generated auth token Secret: CheckName(``<c>``)."""
    return check_name(cluster)


def gcs_pvc_name(cluster: str) -> str:
    """The rocksdb GCS PVC the operator creates."""
    return f"{cluster}-gcs-pvc"


def redis_cleanup_job_name(cluster: str) -> str:
    """CheckLabel(``<c>-redis-cleanup``)."""
    return check_label(f"{cluster}-redis-cleanup")


def head_service_fqdn(service: str, namespace: str, cluster_domain: str) -> str:
    """``<svc>.<ns>.svc.<domain>``: the address workers use to reach the head."""
    return f"{service}.{namespace}.svc.{cluster_domain}"


def selector(labels: dict[str, str]) -> str:
    """A label selector string ``k=v,...`` in key order."""
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))
