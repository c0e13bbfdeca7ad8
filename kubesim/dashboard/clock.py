"""The time source of the simulators, injectable so tests move time instead of sleeping.

A :class:`Clock` gives monotonic seconds (for durations: a job's run length, a serve deploy delay) and wall
seconds (for the epoch timestamps the Ray dashboard and the kubelet report). The simulators compute their
state lazily from the clock when asked, so advancing a :class:`ManualClock` is enough to make a job finish;
nothing here sleeps.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic and wall time, in float seconds."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (durations only)."""
        ...

    def time(self) -> float:
        """Seconds since the Unix epoch (timestamps)."""
        ...


class SystemClock:
    """The real clocks of the process."""

    def monotonic(self) -> float:
        """Return :func:`time.monotonic`."""
        return time.monotonic()

    def time(self) -> float:
        """Return :func:`time.time`."""
        return time.time()


class ManualClock:
    """A clock that only moves when told to (for tests)."""

    def __init__(self, *, start_wall: float = 1_700_000_000.0) -> None:
        self._mono = 0.0
        self._wall = start_wall

    def monotonic(self) -> float:
        """Return the current manual monotonic time."""
        return self._mono

    def time(self) -> float:
        """Return the current manual wall time."""
        return self._wall

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds``.

        Raises:
            ValueError: if ``seconds`` is negative (a clock never goes backwards).
        """
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._mono += seconds
        self._wall += seconds
