"""End-to-end tier: the whole pipeline on real nats-server, kubesim and databases."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_exporter = InMemorySpanExporter()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def _tracer_provider() -> TracerProvider:
    """One in-memory exporter for the session, installed before any service sets up tracing."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    return provider


@pytest.fixture
def spans(_tracer_provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    """Spans finished during this test."""
    _exporter.clear()
    yield _exporter
    _exporter.clear()
