"""``freshness`` on a real bus: the newest applied revision of a key outlives the process that applied it
and is shared by the applier replicas (KV ``raybus-applied``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from schema import subjects
from schema.keys import ReconcileKey
from schema.messages import CommandBatch
from services.edge.apply.freshness import Freshness
from tests.component.watcher.conftest import Bus

KEY = ReconcileKey(kind="RayCluster", namespace="default", name="rc")
AT = datetime(2026, 1, 1, tzinfo=UTC)


def batch(revision: int, key: ReconcileKey = KEY) -> CommandBatch:
    return CommandBatch(id=f"b{revision}", key=key, issued_at=AT, commands=(), snapshot_revision=revision)


async def test_a_replay_is_refused_by_another_replica_and_after_a_restart(bus: Bus) -> None:
    first = Freshness(floors=bus.buckets.applied)
    assert await first.judge(batch(10), verified=True) == ""
    assert await first.judge(batch(12), verified=True) == ""
    await first.stored(KEY)  # what the applier waits for before it acknowledges the batch
    replica = Freshness(floors=bus.buckets.applied)  # another process: nothing in its memory
    assert "batch b10 was decided on revision 10, before revision 12" in await replica.judge(batch(10), verified=True)
    assert await replica.judge(batch(12), verified=True) == ""  # the same decision again (a redelivery)
    assert await replica.judge(batch(15), verified=True) == ""
    await replica.stored(KEY)
    restarted = Freshness(floors=bus.buckets.applied)
    assert "before revision 15" in await restarted.judge(batch(12), verified=True)
    assert "before revision 15" in await first.judge(batch(12), verified=True)  # it reads what the replica wrote
    other = ReconcileKey(kind="RayJob", namespace="default", name="rc")
    assert await restarted.judge(batch(1, other), verified=True) == ""
    entry = await bus.buckets.applied.get(subjects.applied_key(KEY))
    assert entry.value == b"15"


async def test_the_revision_is_written_while_the_commands_run_and_in_order(bus: Bus) -> None:
    fresh = Freshness(floors=bus.buckets.applied)
    await fresh.stored(KEY)  # nothing accepted yet: nothing to wait for
    for revision in range(20, 30):
        assert await fresh.judge(batch(revision), verified=True) == ""  # each waits for the write before it
    await fresh.stored(KEY)
    assert (await bus.buckets.applied.get(subjects.applied_key(KEY))).value == b"29"
    assert "before revision 29" in await Freshness(floors=bus.buckets.applied).judge(batch(28), verified=True)


async def test_an_unverified_revision_is_not_stored(bus: Bus) -> None:
    fresh = Freshness(floors=bus.buckets.applied)
    assert await fresh.judge(batch(10**9), verified=False) == ""  # the facts never reached it: maybe forged
    await fresh.stored(KEY)
    verified = Freshness(floors=bus.buckets.applied)
    assert await verified.judge(batch(5), verified=True) == ""
    await verified.stored(KEY)
    assert (await bus.buckets.applied.get(subjects.applied_key(KEY))).value == b"5"


async def test_only_digits_count_as_a_stored_revision(bus: Bus) -> None:
    await bus.buckets.applied.put(subjects.applied_key(KEY), b"not a number")
    fresh = Freshness(floors=bus.buckets.applied)
    assert await fresh.judge(batch(3), verified=True) == ""
    await fresh.stored(KEY)
    assert (await bus.buckets.applied.get(subjects.applied_key(KEY))).value == b"3"


async def test_a_verification_still_running_is_answered_as_a_flag_would_be(bus: Bus) -> None:
    """The applier hands over its facts check unfinished, so that the bucket's read runs beside it."""

    async def facts_reached(answer: bool) -> bool:
        await asyncio.sleep(0)  # still running when the judge starts its read
        return answer

    fresh = Freshness(floors=bus.buckets.applied)
    assert await fresh.judge(batch(10**9), verified=facts_reached(False)) == ""
    assert await fresh.judge(batch(7), verified=facts_reached(True)) == ""
    await fresh.stored(KEY)
    assert (await bus.buckets.applied.get(subjects.applied_key(KEY))).value == b"7"
    replica = Freshness(floors=bus.buckets.applied)
    assert "before revision 7" in await replica.judge(batch(6), verified=facts_reached(True))
