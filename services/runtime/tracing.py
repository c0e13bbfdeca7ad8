"""OpenTelemetry tracing: provider set-up from the standard ``OTEL_*`` variables and W3C trace context
carried in NATS headers, so watch event → reconcile → command → API call → persisted transition form one
trace (docs/architecture.md#observability). Spans never carry secrets: only kinds, keys, resourceVersions and verbs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

from schema.keys import ReconcileKey

ENTRY_WRITTEN: Final = "entry written"
"""Event of a ``watcher.project`` span: the object's KV entry is stored (its WatchEvent is published next)."""
SNAPSHOT_READ: Final = "snapshot read"
"""Event of a ``reconcile`` span: the key's snapshot is had (the pure reconcile runs next)."""
DECIDED: Final = "decided"
"""Event of a ``reconcile`` span: the decision is drafted and split into kept and withheld commands."""
DECISION_STORED: Final = "decision stored"
"""Event of a ``reconcile`` span: JetStream acknowledged the decision's command batch (the applier can have it)."""

_configured = False


def setup_tracing(service_name: str) -> None:
    """Install a tracer provider once per process.

    Exporters follow ``OTEL_TRACES_EXPORTER`` (``console`` or ``none``; ``otlp`` when the OTLP exporter
    package is installed); with none, spans are not recorded. Tests install their own provider with an
    in-memory exporter first.
    """
    global _configured
    if _configured or isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    _configured = True
    exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "none")
    # Without an exporter a recorded span would only cost CPU: spans are then sampled out unless a
    # sampler is asked for (OTEL_TRACES_SAMPLER). They keep valid trace and span ids, so a change's trace
    # id still travels in message headers and reaches logs and the history.
    sampler = ParentBased(ALWAYS_OFF) if exporter_name == "none" and "OTEL_TRACES_SAMPLER" not in os.environ else None
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}), sampler=sampler)
    if exporter_name == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    elif exporter_name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:  # optional dependency: say why nothing is exported
            import logging

            logging.getLogger(__name__).warning("OTEL_TRACES_EXPORTER=otlp but the OTLP exporter is not installed")
        else:
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


def inject_headers(headers: dict[str, str]) -> None:
    """Write the current span's W3C ``traceparent`` (and ``tracestate``) into ``headers``."""
    propagate.inject(headers)


def extract_context(headers: Mapping[str, str] | None) -> otel_context.Context:
    """The trace context a message carried (empty context when none)."""
    return propagate.extract(dict(headers or {}))


def current_traceparent() -> str:
    """The current span's W3C ``traceparent``, or "" outside a trace: what a message carries in its headers,
    for a record that travels with others in one message."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent", "")


def current_trace_id(context: otel_context.Context | None = None) -> str:
    """Hex trace id of the current span (or of the span ``context`` carries), or "" outside a trace."""
    ctx = trace.get_current_span(context).get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


def key_attributes(key: ReconcileKey) -> dict[str, str]:
    """The attributes by which a span names the reconcile key it works for."""
    return {"raybus.key": str(key), "raybus.kind": key.kind, "k8s.namespace.name": key.namespace}


def tracer(name: str) -> trace.Tracer:
    """The tracer of a module."""
    return trace.get_tracer(name)
