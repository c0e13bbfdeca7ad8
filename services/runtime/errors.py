"""The one raybus error hierarchy: every failure a caller branches on is one of these types.

Third-party exceptions are translated at the adapter that sees them (``raise ... from``), so callers
branch on these types only. ``CancelledError`` is never caught by code that handles these.
"""

from __future__ import annotations


class RaybusError(Exception):
    """Base of every raybus error."""


class PermanentError(RaybusError):
    """Retrying cannot help (bad request, forbidden, invalid object)."""


class RetryableError(RaybusError):
    """A transient failure; try again after ``delay`` seconds."""

    def __init__(self, message: str, *, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = delay


class ReplayDivergence(RaybusError):
    """Today's reconcile decides differently from what was recorded."""

    def __init__(self, message: str, *, step: int, expected: object, actual: object) -> None:
        super().__init__(message)
        self.step = step
        self.expected = expected
        self.actual = actual


class TopologyError(RaybusError):
    """The NATS server cannot host raybus (too old, JetStream off, conflicting stream config)."""
