"""OpenTelemetry metrics exported in Prometheus format on each service's ``/metrics``.

Instrument names follow KubeRay where the meaning matches (``kuberay_job_execution_duration_seconds``,
...) and raybus's own otherwise (``raybus_reconcile_duration_seconds``, bus lag, ...).
"""

from __future__ import annotations

from opentelemetry import metrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

_configured = False


def setup_metrics(service_name: str) -> None:
    """Install a meter provider whose reader feeds the Prometheus registry (once per process)."""
    global _configured
    if _configured:
        return
    _configured = True
    reader = PrometheusMetricReader()
    metrics.set_meter_provider(
        MeterProvider(resource=Resource.create({"service.name": service_name}), metric_readers=[reader])
    )


def meter(name: str, *, version: str = "") -> metrics.Meter:
    """The meter of a module (``version`` makes a separate instrumentation scope of the same name)."""
    return metrics.get_meter(name, version)


def render_prometheus() -> tuple[bytes, str]:
    """Current metrics in Prometheus text format, with its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
