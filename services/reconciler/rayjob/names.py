"""Names, label keys and annotation keys of the RayJob controller, and the deterministic ``rand5``.

Role: KubeRay draws ``<rj>-<rand5>`` for the RayCluster and the Ray job id. raybus derives those five
characters from a hash of stable inputs instead, so a replay of the same snapshot reproduces them and a
retry (a new attempt) gets fresh ones.

Invariants: :func:`rand5` is a pure function of its inputs and only yields ``[a-z0-9]{5}``.

Not here: names owned by the RayCluster controller (head Service, pods); see ``raycluster``.
"""

from __future__ import annotations

import hashlib
from typing import Final

FINALIZER: Final = "ray.io/rayjob-finalizer"
CLUSTER_LABEL: Final = "ray.io/cluster"
NODE_TYPE_LABEL: Final = "ray.io/node-type"
IDENTIFIER_LABEL: Final = "ray.io/identifier"
ORIGINATED_FROM_CR_NAME: Final = "ray.io/originated-from-cr-name"
ORIGINATED_FROM_CRD: Final = "ray.io/originated-from-crd"
JOB_SUBMISSION_MODE_LABEL: Final = "ray.io/job-submission-mode"
CREATED_BY_LABEL: Final = "app.kubernetes.io/created-by"
CREATED_BY_VALUE: Final = "kuberay-operator"
DISABLE_PROVISIONED_HEAD_RESTART: Final = "ray.io/disable-provisioned-head-restart"
CLUSTER_SELECTOR_KEY: Final = "ray.io/cluster"

SUBMITTER_CONTAINER: Final = "ray-job-submitter"
DASHBOARD_PORT_NAME: Final = "dashboard"
DEFAULT_DASHBOARD_PORT: Final = 8265

MAX_RAYJOB_NAME_LENGTH: Final = 47

_ALPHABET: Final = "abcdefghijklmnopqrstuvwxyz0123456789"


def rand5(*parts: str) -> str:
    """Five ``[a-z0-9]`` characters derived from ``parts`` (a stand-in for KubeRay's random suffix)."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()
    number = int.from_bytes(digest[:16], "big")
    chars = []
    for _ in range(5):
        number, index = divmod(number, len(_ALPHABET))
        chars.append(_ALPHABET[index])
    return "".join(chars)


def attempt_suffix(*, uid: str, purpose: str, attempt: str) -> str:
    """The suffix of a generated name: distinct per RayJob uid, per purpose and per attempt."""
    return rand5(uid, purpose, attempt)


def check_name(name: str) -> str:
    """KubeRay's CheckName: keep the last 50 characters; a leading digit or punctuation becomes ``r``."""
    if len(name) > 50:
        name = name[-50:]
    if name and not name[0].isalpha():
        name = "r" + name[1:]
    return name


def check_label(value: str) -> str:
    """KubeRay's CheckLabel: keep the last 63 characters; a leading punctuation becomes ``r``."""
    if len(value) > 63:
        value = value[-63:]
    if value and not value[0].isalnum():
        value = "r" + value[1:]
    return value


def head_service_name_for_rayjob(rayjob_name: str) -> str:
    """The extra head Service a RayJob owns: ``<rj>-head-svc``."""
    return f"{rayjob_name}-head-svc"
