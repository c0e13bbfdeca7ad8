"""A Tally counts in the process and reaches a metric reader as a monotonic counter."""

from __future__ import annotations

import threading

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Sum

from services.runtime.metrics import Tally


def _points(reader: InMemoryMetricReader) -> dict[tuple[tuple[str, str], ...], int | float]:
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[tuple[tuple[str, str], ...], int | float] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                assert metric.name == "raybus_things_total"
                assert isinstance(metric.data, Sum)
                assert metric.data.is_monotonic
                for point in metric.data.data_points:
                    found[tuple(sorted((k, str(v)) for k, v in (point.attributes or {}).items()))] = point.value
    return found


def test_totals_are_kept_per_set_of_attributes_whatever_their_order() -> None:
    reader = InMemoryMetricReader()
    tally = Tally(MeterProvider(metric_readers=[reader]).get_meter("t"), "raybus_things_total", description="d")
    tally.add(1, {"verb": "create", "outcome": "applied"})
    tally.add(2, {"outcome": "applied", "verb": "create"})
    tally.add(5, {"verb": "delete", "outcome": "failed"})
    tally.add(1)
    assert _points(reader) == {
        (("outcome", "applied"), ("verb", "create")): 3,
        (("outcome", "failed"), ("verb", "delete")): 5,
        (): 1,
    }
    tally.add(1, {"verb": "delete", "outcome": "failed"})
    assert _points(reader)[(("outcome", "failed"), ("verb", "delete"))] == 6


def test_counts_from_several_threads_are_all_kept() -> None:
    reader = InMemoryMetricReader()
    tally = Tally(MeterProvider(metric_readers=[reader]).get_meter("t"), "raybus_things_total")

    def count() -> None:
        for _ in range(20_000):
            tally.add(1, {"resource": "pods"})

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _points(reader) == {(("resource", "pods"),): 80_000}
