"""The results consumer on its own: spans that continue the publisher's trace, and a result the database
refuses isolated to the dead-letter stream while the rest of its batch is persisted."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client
from nats.js import JetStreamContext
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from schema import codec, subjects
from schema.messages import DeadLetter, ResultBatch
from services.runtime.backoff import Backoff
from services.status.consumer import ResultConsumer
from services.status.store import StatusStore
from tests.component.status.conftest import count, publish_results
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually
from tests.unit.status.builders import result, transition

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


async def consume_all(nc: Client, store: StatusStore) -> InMemorySpanExporter:
    """Run a consumer until every stored result is acked; returns its spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    consumer = ResultConsumer(nc, store, tracer=provider.get_tracer("test"))
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:

        async def settled() -> bool:
            info = await nc.jetstream().consumer_info(subjects.RESULTS_STREAM, subjects.STATUS_CONSUMER)
            return bool(info.num_pending == 0 and info.num_ack_pending == 0)

        await eventually(settled, message="every result acked")
    finally:
        stop.set()
        await task
    return exporter


async def letters(js: JetStreamContext, expected: int) -> list[DeadLetter]:
    """The first ``expected`` dead letters of the results stream."""
    dlq = await js.pull_subscribe(
        subjects.deadletter_subject(subjects.RESULTS_STREAM), stream=subjects.DEADLETTER_STREAM
    )
    try:
        return [codec.decode_deadletter(m.data) for m in await dlq.fetch(expected, timeout=5)]
    finally:
        await dlq.unsubscribe()


async def test_spans_continue_the_trace_and_refused_data_is_isolated(nc: Client, store: StatusStore) -> None:
    js = nc.jetstream()
    good = [
        result(transition("state", "", f"s{i}", kind="RayCluster", uid="c", name="c", rv=str(i)), batch_id=f"g{i}")
        for i in range(4)
    ]
    poison = result(batch_id="poison", status_code=2**63, kind="RayCluster", name="c")  # no BIGINT holds it
    headers = {"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}
    await publish_results(js, [*good[:2], poison, *good[2:]], headers=headers)

    exporter = await consume_all(nc, store)

    assert await count(store, "commands") == 4
    assert await count(store, "transitions") == 4
    [letter] = await letters(js, 1)
    assert letter.sequence == 3
    assert letter.error.startswith("refused by the database")
    assert [r.batch_id for r in codec.decode_results(letter.payload)] == ["poison"]

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
    consumer = ResultConsumer(nc, store, retry_backoff=Backoff(base=0.05, cap=0.2))
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        assert consumer.readiness() is not None and not task.done()
        await asyncio.to_thread(nats_server.start)
        await eventually(lambda: consumer.readiness() is None and not task.done(), timeout=30)
        await publish_results(js, [result(batch_id="after-restart", kind="RayCluster", name="c")])
        await eventually(lambda: count(store, "commands"), message="the result persisted")
    finally:
        stop.set()
        await task


async def test_a_runs_results_in_one_message_are_each_persisted_and_a_refused_one_parks_its_message(
    nc: Client, store: StatusStore
) -> None:
    """An applier publishes a run's results together: each is persisted in its own span, and when the
    database refuses one, its whole message is parked (its other results are persisted all the same; the
    natural keys make a later replay of the letter a no-op) while the next message goes on."""
    js = nc.jetstream()
    run = [
        result(transition("state", "", f"s{i}", kind="RayCluster", uid="c", name="c", rv=str(i)), command_id=str(i))
        for i in range(3)
    ]
    poisoned = [result(batch_id="p", command_id="ok", kind="RayCluster", name="c"), run[0]]
    poisoned.insert(1, result(batch_id="p", command_id="bad", status_code=2**63, kind="RayCluster", name="c"))
    subject = subjects.result_subject(run[0].key)
    await js.publish(subject, codec.encode(ResultBatch(results=tuple(run))))
    await js.publish(subject, codec.encode(ResultBatch(results=tuple(poisoned))))
    await js.publish(
        subject, codec.encode(ResultBatch(results=(result(batch_id="after", kind="RayCluster", name="c"),)))
    )

    exporter = await consume_all(nc, store)

    assert await count(store, "commands") == 5  # the run's three, "ok" and "after"
    assert await count(store, "transitions") == 3
    [letter] = await letters(js, 1)
    assert letter.sequence == 2
    assert letter.error.startswith("refused by the database")
    assert [r.command_id for r in codec.decode_results(letter.payload)] == ["ok", "bad", "0"]
    assert len(exporter.get_finished_spans()) == 7
