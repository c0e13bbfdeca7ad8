"""When a key is decided again although no event came: its resync (docs/architecture.md#liveness).

An event stream can lose, reorder or duplicate an edge (a watcher killed between its KV write and its
event, a tick of a schedule lost with its stream, a write refused as stale with no event to follow). The
API server's state, projected into the KV, is the truth; so every live key is decided again from a fresh
snapshot at most ``period`` seconds after its last decision, whatever the events did.

Each key has its own interval, between ``period / 2`` and ``period``, from a digest of its name: keys
created together (10,000 RayClusters applied at once) resync spread over half a period instead of in one
wave, and keep drifting apart afterwards. The digest, not randomness, so a key's interval is the same
in every worker that holds it, and a test can name it.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from schema.keys import ReconcileKey


def phase(key: ReconcileKey) -> float:
    """A number in [0, 1) that spreads keys evenly: a digest of the key's token."""
    digest = hashlib.blake2b(key.token().encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def interval(key: ReconcileKey, period: float) -> float:
    """Seconds from a decision of ``key`` to its resync: in [``period / 2``, ``period``)."""
    return period * (0.5 + 0.5 * phase(key))


def resync_at(key: ReconcileKey, now: datetime, period: float) -> datetime | None:
    """When ``key``, decided at ``now``, is decided again if nothing else wakes it; None when ``period`` is
    0 (resync off)."""
    if period <= 0:
        return None
    return now + timedelta(seconds=interval(key, period))
