"""The five characters KubeRay draws at random for a generated name, derived from stable inputs instead.

Role: KubeRay names a RayJob's cluster and job id ``<rj>-<rand5>`` and a RayService's clusters
``<rs>-<rand5>`` with ``utilrand.String(5)``; raybus hashes the inputs that make each name unique (a uid,
an attempt, a generation), so a replay of the same snapshot reproduces the name
(docs/differences.md#determinism).

Invariants: :func:`rand5` is a pure function of its inputs and only yields ``[a-z0-9]{5}``.
"""

from __future__ import annotations

import hashlib
from typing import Final

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
