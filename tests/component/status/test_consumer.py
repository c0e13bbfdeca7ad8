"""The results consumer on its own: spans that continue the publisher's trace, and a result the database
refuses isolated to the dead-letter stream while the rest of its batch is persisted."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from schema import codec, subjects
from services.runtime.backoff import Backoff
from services.status.consumer import ResultConsumer
from services.status.store import StatusStore
from tests.component.status.conftest import count, publish_results, wait_until
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually
from tests.unit.status.builders import result, transition

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


async def test_spans_continue_the_trace_and_refused_data_is_isolated(nc: Client, store: StatusStore) -> None:
    js = nc.jetstream()
    good = [
        result(transition("state", "", f"s{i}", kind="RayCluster", uid="c", name="c", rv=str(i)), batch_id=f"g{i}")
        for i in range(4)
    ]
    poison = result(batch_id="poison", status_code=2**63, kind="RayCluster", name="c")  # no BIGINT holds it
    headers = {"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}
    await publish_results(js, [*good[:2], poison, *good[2:]], headers=headers)

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    consumer = ResultConsumer(js, store, tracer=provider.get_tracer("test"))
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:

        async def settled() -> bool:
            info = await js.consumer_info(subjects.RESULTS_STREAM, subjects.STATUS_CONSUMER)
            return bool(info.num_pending == 0 and info.num_ack_pending == 0)

        await wait_until(settled, message="every result acked")
    finally:
        stop.set()
        await task

    assert await count(store, "commands") == 4
    assert await count(store, "transitions") == 4
    dlq = await js.pull_subscribe(
        subjects.deadletter_subject(subjects.RESULTS_STREAM), stream=subjects.DEADLETTER_STREAM
    )
    [letter] = [codec.decode_deadletter(m.data) for m in await dlq.fetch(1, timeout=5)]
    await dlq.unsubscribe()
    assert letter.sequence == 3
    assert letter.error.startswith("refused by the database")
    assert codec.decode_result(letter.payload).batch_id == "poison"

    spans = exporter.get_finished_spans()
    assert {s.name for s in spans} == {"status.persist"}
    assert len(spans) == 5
    assert all(format(s.context.trace_id, "032x") == TRACE for s in spans)
    assert {(s.attributes or {}).get("raybus.key") for s in spans} == {"RayCluster/default/c"}
    assert sum(not s.status.is_ok for s in spans) == 1


async def test_a_consumer_started_while_nats_restarts_waits_for_it(
    nc: Client, store: StatusStore, nats_server: NatsServer
) -> None:
    """The status service's consumer may start while NATS is restarting (a rollout of both): it waits and
    then consumes, and is not ready before, instead of ending the service."""
    js = nc.jetstream()
    await asyncio.to_thread(nats_server.stop)
    consumer = ResultConsumer(js, store, retry_backoff=Backoff(base=0.05, cap=0.2))
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        assert consumer.readiness() is not None and not task.done()
        await asyncio.to_thread(nats_server.start)
        await eventually(lambda: consumer.readiness() is None and not task.done(), timeout=30)
        await publish_results(js, [result(batch_id="after-restart", kind="RayCluster", name="c")])
        await wait_until(lambda: count(store, "commands"), message="the result persisted")
    finally:
        stop.set()
        await task
