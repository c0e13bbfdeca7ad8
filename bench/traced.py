"""Runs one raybus service with its spans written as JSON lines to ``$RAYBUS_BENCH_SPANS/<pid>.jsonl``.

The latency bench launches every service through this instead of ``python -m services.cli.main``: the
tracer provider installed here comes first, so the service's own set-up keeps it (as the tests' in-memory
exporter does). Only the fields the bench reads are written.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import msgspec
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


class JsonLinesExporter(SpanExporter):
    """Appends one JSON object per finished span to a file."""

    def __init__(self, path: Path) -> None:
        self._file: IO[bytes] = path.open("ab")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for span in spans:
            context = span.get_span_context()
            assert context is not None
            lines.append(
                msgspec.json.encode(
                    {
                        "name": span.name,
                        "trace": format(context.trace_id, "032x"),
                        "span": format(context.span_id, "016x"),
                        "parent": format(span.parent.span_id, "016x") if span.parent else "",
                        "start": span.start_time,
                        "end": span.end_time,
                        "attributes": dict(span.attributes or {}),
                        "events": {event.name: event.timestamp for event in span.events},
                    }
                )
            )
        self._file.write(b"\n".join(lines) + b"\n")
        self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._file.close()


def main() -> int:
    provider = TracerProvider()
    directory = Path(os.environ["RAYBUS_BENCH_SPANS"])
    provider.add_span_processor(
        BatchSpanProcessor(JsonLinesExporter(directory / f"{os.getpid()}.jsonl"), schedule_delay_millis=200)
    )
    trace.set_tracer_provider(provider)
    from services.cli.main import main as raybus_main

    try:
        return raybus_main()
    finally:
        provider.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
