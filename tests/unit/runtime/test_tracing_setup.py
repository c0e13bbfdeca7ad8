"""Without an exporter, spans are not recorded but keep their trace ids; with one, they are recorded.

Each case runs in a fresh interpreter: the tracer provider is global and set once per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PROBE = """
from opentelemetry import trace
from services.runtime.tracing import current_trace_id, setup_tracing
setup_tracing("probe")
with trace.get_tracer("probe").start_as_current_span("parent") as span:
    print(span.is_recording(), bool(current_trace_id()))
"""


@pytest.mark.parametrize(
    ("env", "recorded"),
    [
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_TRACES_SAMPLER": "always_on"}, True),
    ],
)
def test_spans_are_recorded_only_when_something_exports_or_samples_them(env: dict[str, str], recorded: bool) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, env={**clean, **env}, capture_output=True, text=True, check=True
    ).stdout.split("\n")[0]
    assert out == f"{recorded} True"  # the trace id is there either way
