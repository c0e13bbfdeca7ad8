"""The clocks of a service, injected so tests can fix time without patching: the wall clock (one type and
one default) wherever a service stamps a time, and the monotonic clock wherever it measures elapsed time.

Reconcile code reads neither (time comes in as ``now``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
"""Returns the current time, timezone-aware UTC."""

Monotonic = Callable[[], float]
"""Seconds on a monotonic clock (``time.monotonic``): elapsed time, never a date."""


def utc_now() -> datetime:
    """The current time in UTC (the default :data:`Clock`)."""
    return datetime.now(UTC)
