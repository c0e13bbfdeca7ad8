"""Which worker owns which partition: rendezvous (highest-random-weight) hashing, a pure function.

Every worker computes the same answer from the same member list, so no coordinator is needed; when a
worker joins or leaves only ~1/N of the partitions move. Leases (``leases.py``) then make the hand-over
safe: a worker starts a partition only after the previous owner released or its lease expired.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def _weight(member: str, partition: int) -> int:
    digest = hashlib.blake2b(f"{member}/{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner_of(partition: int, members: Iterable[str]) -> str | None:
    """The member that should own ``partition`` (None when there are no members)."""
    best: tuple[int, str] | None = None
    for member in members:
        candidate = (_weight(member, partition), member)
        if best is None or candidate > best:
            best = candidate
    return None if best is None else best[1]


def partitions_of(member: str, members: Iterable[str], partitions: int) -> frozenset[int]:
    """The partitions ``member`` should own among ``members``."""
    everyone = sorted(set(members) | {member})
    return frozenset(p for p in range(partitions) if owner_of(p, everyone) == member)
