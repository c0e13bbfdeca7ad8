"""A run's results go out together: one message for a short run, a message per full stretch of a long one,
each under an id that names the run and its place in it; closing waits until every message is stored."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import msgspec

from schema import codec
from schema.keys import ReconcileKey
from schema.messages import CommandResult, ResultBatch
from services.edge.apply.reports import MAX_MESSAGE_BYTES, RESULTS_PER_MESSAGE, RunReport, run_id

KEY = ReconcileKey(kind="RayCluster", namespace="default", name="demo")


def outcome(index: int, error: str = "") -> CommandResult:
    return CommandResult(
        batch_id="b",
        command_id=str(index),
        key=KEY,
        verb="create_object",
        target=f"Pod default/demo-{index}",
        outcome="applied",
        at=datetime(2026, 1, 1, tzinfo=UTC),
        error=error,
    )


class Stored:
    """Records each publish; a publish completes only when released, like a server's answer."""

    def __init__(self) -> None:
        self.payloads: list[tuple[str, bytes]] = []
        self.released = asyncio.Event()

    async def __call__(self, payload: bytes, msg_id: str) -> None:
        self.payloads.append((msg_id, payload))
        await self.released.wait()

    @property
    def messages(self) -> list[tuple[str, tuple[CommandResult, ...]]]:
        """Each message's id and the results it holds."""
        return [(msg_id, codec.decode_results(payload)) for msg_id, payload in self.payloads]


async def test_a_short_run_is_one_message_sent_when_it_closes() -> None:
    stored = Stored()
    stored.released.set()
    report = RunReport(stored, run_id("b", batch_seq=7, delivery=2))
    for i in range(3):
        report.add(outcome(i))
    await asyncio.sleep(0)
    assert stored.messages == []
    await report.close()
    assert [(msg_id, [r.command_id for r in results]) for msg_id, results in stored.messages] == [
        ("b/7/2/0", ["0", "1", "2"])
    ]


async def test_a_long_run_sends_each_full_stretch_and_close_waits_for_all() -> None:
    stored = Stored()
    report = RunReport(stored, run_id("b", batch_seq=7, delivery=1))
    for i in range(RESULTS_PER_MESSAGE + 1):
        report.add(outcome(i))
    await asyncio.sleep(0)
    assert [len(results) for _, results in stored.messages] == [RESULTS_PER_MESSAGE]
    closing = asyncio.ensure_future(report.close())
    await asyncio.sleep(0)
    assert not closing.done()  # the stored answers have not come
    stored.released.set()
    await closing
    assert [msg_id for msg_id, _ in stored.messages] == ["b/7/1/0", "b/7/1/1"]
    assert [r.command_id for _, results in stored.messages for r in results] == [
        str(i) for i in range(RESULTS_PER_MESSAGE + 1)
    ]


async def test_large_results_are_sent_before_a_message_nears_its_bound() -> None:
    stored = Stored()
    stored.released.set()
    report = RunReport(stored, run_id("b", batch_seq=1, delivery=1))
    for i in range(4):
        report.add(outcome(i, error="x" * (MAX_MESSAGE_BYTES // 3)))
    await report.close()
    assert [len(results) for _, results in stored.messages] == [3, 1]


async def test_a_run_without_results_sends_nothing() -> None:
    stored = Stored()
    await RunReport(stored, run_id("b", batch_seq=1, delivery=1)).close()
    assert stored.messages == []


async def test_one_by_one_each_result_is_its_own_message_sent_at_once() -> None:
    """While an earlier release may read the results (``BusSettings.result_batches`` off), each result goes
    out alone, in the form every release decodes, under the run's name and its command's id."""
    stored = Stored()
    stored.released.set()
    report = RunReport(stored, run_id("b", batch_seq=7, delivery=1), together=False)
    report.add(outcome(5))
    await asyncio.sleep(0)
    assert [msg_id for msg_id, _ in stored.messages] == ["b/7/1/5"]
    report.add(outcome(9))
    await report.close()
    assert [(msg_id, [r.command_id for r in results]) for msg_id, results in stored.messages] == [
        ("b/7/1/5", ["5"]),
        ("b/7/1/9", ["9"]),
    ]


async def test_one_by_one_sends_the_plain_result_an_earlier_release_decodes() -> None:
    stored = Stored()
    stored.released.set()
    report = RunReport(stored, run_id("b", batch_seq=1, delivery=1), together=False)
    report.add(outcome(0))
    await report.close()
    assert [msgspec.json.decode(payload)["type"] for _, payload in stored.payloads] == ["command_result"]


async def test_a_batch_of_encoded_results_is_the_batch_of_the_results() -> None:
    """Each result is encoded once, when it is gathered; the message is what encoding the batch of the
    results themselves gives."""
    stored = Stored()
    stored.released.set()
    report = RunReport(stored, run_id("b", batch_seq=1, delivery=1))
    results = (outcome(0), outcome(1, error="refused"))
    for one in results:
        report.add(one)
    await report.close()
    assert [payload for _, payload in stored.payloads] == [codec.encode(ResultBatch(results=results))]
