"""What the latency benches time and how they sum it up: each event of a raw watch stream with the time
its line arrived, and a percentile of timed samples (``latency_bench.py``, ``roundtrip_bench.py``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import msgspec


def watch_events(response: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each event of a raw watch stream (``_preload_content=False``), decoded, with the time (ns) its line
    arrived."""
    buffer = b""
    for chunk in response.stream(4096):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                arrived = time.time_ns()
                yield arrived, msgspec.json.decode(line)


def percentile(values: list[float], q: float) -> float:
    """The sample at quantile ``q`` (0 to 1) of ``values``, by rank: a value that was measured."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
