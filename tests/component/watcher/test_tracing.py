"""One trace from a projected watch event to the applier's API call and its published result."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import msgspec
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from schema import codec, subjects
from schema.keys import ReconcileKey
from schema.messages import CommandBatch, CreateObject, ObjectRef
from services.edge.apply.applier import Applier
from services.edge.kubeapi import KubeApi
from services.edge.resources import by_kind
from services.edge.watch.informer import Batch, Change, Scope
from services.edge.watch.projection import Projection
from services.runtime.bus import publish
from services.runtime.tracing import ENTRY_WRITTEN, extract_context
from tests.component.watcher.conftest import Bus, until


def _cluster_change(namespace: str) -> Change:
    obj: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "traced", "namespace": namespace, "uid": "u-traced", "resourceVersion": "41"},
    }
    return Change(
        type="ADDED",
        obj=obj,
        raw=msgspec.json.encode(obj),
        uid="u-traced",
        resource_version="41",
        namespace=namespace,
        name="traced",
    )


async def test_watch_event_command_and_result_share_one_trace(
    bus: Bus, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    ns = kubesim_namespace
    key = ReconcileKey(kind="RayCluster", namespace=ns, name="traced")
    resource = by_kind("RayCluster")
    assert resource is not None

    projection = Projection(bus.js, tracer=tracer)
    await projection.project(Batch(Scope(resource, ns), (_cluster_change(ns),)))
    await projection.drain()
    stored = await bus.js.get_msg(subjects.EVENTS_STREAM, seq=1)
    assert stored.headers is not None and "traceparent" in stored.headers
    project_span = next(s for s in exporter.get_finished_spans() if s.name == "watcher.project")
    trace_id = project_span.context.trace_id
    assert dict(project_span.attributes or {}) == {
        "k8s.namespace.name": ns,
        "raybus.kind": "RayCluster",
        "raybus.key": str(key),
        "k8s.resource_version": "41",
        "raybus.event_type": "ADDED",
    }
    assert [e.name for e in project_span.events] == [ENTRY_WRITTEN]

    # The reconciler continues the event's trace and publishes its commands inside it.
    with tracer.start_as_current_span("reconcile", context=extract_context(stored.headers)):
        command = CreateObject(
            id="sa", target=ObjectRef(api_version="v1", kind="ServiceAccount", namespace=ns, name="traced"), body={}
        )
        batch = CommandBatch(id="traced-1", key=key, issued_at=datetime.now(UTC), commands=(command,))
        await publish(bus.js, subjects.command_subject(key), codec.encode(batch), msg_id=batch.id)

    applier = Applier(bus.nc, kube_api, membership=bus.membership(), concurrency=1, tracer=tracer)
    stop = asyncio.Event()
    task = asyncio.create_task(applier.run(stop))
    try:

        async def applied() -> dict[str, Any] | None:
            return next((r for r in await bus.results(key) if r["verb"] == "create_object"), None)

        result = await until(applied, message="the command's result")
    finally:
        stop.set()
        await task
    assert result["trace_id"] == format(trace_id, "032x")
    names = {s.name for s in exporter.get_finished_spans() if s.context.trace_id == trace_id}
    assert names == {"watcher.project", "reconcile", "applier.create_object"}
    lifecycle = next(s for s in exporter.get_finished_spans() if s.name == "watcher.lifecycle")
    assert (lifecycle.attributes or {})["raybus.lifecycle"] == "created"
    apply_span = next(s for s in exporter.get_finished_spans() if s.name == "applier.create_object")
    assert (apply_span.attributes or {})["raybus.outcome"] == "applied"
    assert (apply_span.attributes or {})["raybus.key"] == str(key)
