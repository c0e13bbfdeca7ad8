"""Names, labels and label selectors of everything a RayCluster owns (docs/behaviour.md#2).

Role: KubeRay's name formats (the keys and labels themselves are ``schema.ray.conventions``), and the names
KubeRay randomises from stable inputs instead, so that replaying a history reproduces every name.

Invariants:
- A "random" 5-character suffix is ``stable_suffix(parts...)``: a hash of the cluster UID and the slot
  it stands for, in the alphabet Kubernetes uses for generateName. The same snapshot therefore always
  names the same pods, so a re-issued create is an AlreadyExists (harmless) and never a second pod.

Not here: which slot is free (``pod_scaling``), object bodies (``pod_bodies``, ``services``, ...).
"""

from __future__ import annotations

import functools
import hashlib
from typing import Final

from schema.ray.conventions import check_label, check_name

# Kubernetes' generateName alphabet (no vowels, no confusable digits).
_SUFFIX_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
# byte → alphabet character, so a digest becomes a suffix with one ``bytes.translate``.
_SUFFIX_TABLE: Final = bytes(ord(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)]) for b in range(256))


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


WORKER_NAMES_REMEMBERED: Final = 8_192
"""Worker pod names remembered (some 2 MB): a scale-up's decisions name the slots not yet seen again and
again, each name a digest of its inputs alone."""


@functools.lru_cache(maxsize=WORKER_NAMES_REMEMBERED)
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
