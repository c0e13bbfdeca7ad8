"""``freshness`` on a real bus: the newest applied revision of a key outlives the process that applied it
and is shared by the applier replicas (KV ``raybus-applied``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from schema import subjects
from schema.keys import ReconcileKey
from schema.messages import CommandBatch
from services.edge.apply.freshness import WRITTEN_STANDS_FOR, Freshness
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


async def test_its_own_write_is_not_read_again_while_its_holding_lasts(bus: Bus) -> None:
    """No other replica writes a key while this one holds the key's partition: what it wrote stands, and a
    write behind its back (which only a new holding can follow) is seen from its next holding on, or once
    its own write is older than ``WRITTEN_STANDS_FOR``."""
    now = [0.0]
    fresh = Freshness(floors=bus.buckets.applied, clock=lambda: now[0])
    assert await fresh.judge(batch(10), verified=True, holding=1) == ""
    await fresh.stored(KEY)
    await bus.buckets.applied.put(subjects.applied_key(KEY), b"20")
    assert await fresh.judge(batch(12), verified=True, holding=1) == ""  # by its own write, 10
    await fresh.stored(KEY)
    assert (await bus.buckets.applied.get(subjects.applied_key(KEY))).value == b"20"  # its write stood back
    assert "before revision 20" in await fresh.judge(batch(14), verified=True, holding=2)
    assert "before revision 20" in await fresh.judge(batch(14), verified=True)  # no holding known: read

    fresh = Freshness(floors=bus.buckets.applied, clock=lambda: now[0])
    assert await fresh.judge(batch(30), verified=True, holding=3) == ""
    await fresh.stored(KEY)
    await bus.buckets.applied.put(subjects.applied_key(KEY), b"40")
    now[0] += WRITTEN_STANDS_FOR
    assert "before revision 40" in await fresh.judge(batch(35), verified=True, holding=3)


async def test_the_stored_revision_only_rises_whoever_writes_late(bus: Bus) -> None:
    """An applier whose lease lapsed may still finish a batch after the partition's next holder applied a
    newer one: its late write must not lower the entry, or a replay of a decision between the two would pass
    the next read. A late write of a higher revision (a batch it did apply) still lands."""
    lapsed, holder = Freshness(floors=bus.buckets.applied), Freshness(floors=bus.buckets.applied)
    assert await lapsed.judge(batch(10), verified=True, holding=1) == ""
    await lapsed.stored(KEY)
    assert await holder.judge(batch(15), verified=True, holding=1) == ""
    await holder.stored(KEY)
    assert await lapsed.judge(batch(12), verified=True, holding=1) == ""  # it still trusts its own write, 10
    await lapsed.stored(KEY)
    assert (await bus.buckets.applied.get(subjects.applied_key(KEY))).value == b"15"
    assert "before revision 15" in await lapsed.judge(batch(13), verified=True, holding=1)  # it read 15 meanwhile
    assert await lapsed.judge(batch(20), verified=True, holding=1) == ""
    await lapsed.stored(KEY)
    assert (await bus.buckets.applied.get(subjects.applied_key(KEY))).value == b"20"
    assert "before revision 20" in await holder.judge(batch(16), verified=True, holding=2)


async def test_a_deleted_entry_is_written_again(bus: Bus) -> None:
    """A write names the revision it follows: after a delete, the tombstone's."""
    fresh = Freshness(floors=bus.buckets.applied)
    assert await fresh.judge(batch(4), verified=True, holding=1) == ""
    await fresh.stored(KEY)
    await bus.buckets.applied.delete(subjects.applied_key(KEY))
    assert await Freshness(floors=bus.buckets.applied).judge(batch(2), verified=False) == ""  # nothing stored
    assert await fresh.judge(batch(6), verified=True, holding=1) == ""  # it follows its own write: refused
    await fresh.stored(KEY)
    assert (await bus.buckets.applied.get(subjects.applied_key(KEY))).value == b"6"
    assert await fresh.judge(batch(7), verified=True) == ""  # read: the entry is there again
    await fresh.stored(KEY)
    assert (await bus.buckets.applied.get(subjects.applied_key(KEY))).value == b"7"
