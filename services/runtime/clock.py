"""The wall clock of a service: one type and one default, injected wherever a service stamps a time.

Reconcile code never reads it (time comes in as ``now``); services take a ``clock`` argument so tests can
fix time without patching. Elapsed-time measurements use ``time.monotonic`` instead, a different thing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
"""Returns the current time, timezone-aware UTC."""


def utc_now() -> datetime:
    """The current time in UTC (the default :data:`Clock`)."""
    return datetime.now(UTC)
