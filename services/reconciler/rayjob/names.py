"""Names of the RayJob controller: the generated suffixes, the submitter container, ``<rj>-head-svc``.

Role: KubeRay draws ``<rj>-<rand5>`` for the RayCluster and the Ray job id. raybus derives those five
characters from a hash of stable inputs instead (``common.names.rand5``), so a replay of the same
snapshot reproduces them and a retry (a new attempt) gets fresh ones. Label and annotation keys are
``schema.ray.conventions``.

Not here: names owned by the RayCluster controller (head Service, pods); see ``raycluster``.
"""

from __future__ import annotations

from typing import Final

from services.reconciler.common.names import rand5

SUBMITTER_CONTAINER: Final = "ray-job-submitter"

MAX_RAYJOB_NAME_LENGTH: Final = 47


def attempt_suffix(*, uid: str, purpose: str, attempt: str) -> str:
    """The suffix of a generated name: distinct per RayJob uid, per purpose and per attempt."""
    return rand5(uid, purpose, attempt)


def head_service_name_for_rayjob(rayjob_name: str) -> str:
    """The extra head Service a RayJob owns: ``<rj>-head-svc``."""
    return f"{rayjob_name}-head-svc"
