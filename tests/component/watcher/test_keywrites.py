"""Writes under a key checked against the key's last write (against a real nats-server): what each one
proves about the write before it."""

from __future__ import annotations

import asyncio
import uuid

from nats.js.api import PubAck

from schema import subjects
from schema.keys import ReconcileKey
from services.edge.watch.keywrites import KeyWrites, Publish
from tests.component.watcher.conftest import Bus


def fresh_key() -> ReconcileKey:
    return ReconcileKey(kind="RayCluster", namespace="keywrites", name=f"k{uuid.uuid4().hex[:8]}")


def entry(bus: Bus, key: ReconcileKey, name: str, value: bytes = b"{}", msg_id: str | None = None) -> Publish:
    """One attempt of writing entry ``name`` under ``key``, with the headers it is given."""
    subject = subjects.kv_subject(subjects.OBJECTS_BUCKET, subjects.entry_key(key, "Pod", name))

    async def attempt(checks: dict[str, str]) -> PubAck:
        headers = {**checks, **({"Nats-Msg-Id": msg_id} if msg_id else {})}
        return await bus.js.publish(subject, value, headers=headers or None)

    return attempt


async def test_each_write_names_the_write_before_it(bus: Bus) -> None:
    writes, key = KeyWrites(subjects.OBJECTS_BUCKET), fresh_key()
    first, previous = await writes.write(key, entry(bus, key, "a"))
    assert previous == 0  # a new key: the bucket checked that nothing was under it
    second, previous = await writes.write(key, entry(bus, key, "b"))
    assert previous == first.seq
    _, previous = await writes.write(key, entry(bus, key, "a"))
    assert previous == second.seq


async def test_a_write_of_another_writer_between_is_learnt_from_the_refusal(bus: Bus) -> None:
    writes, key = KeyWrites(subjects.OBJECTS_BUCKET), fresh_key()
    await writes.write(key, entry(bus, key, "a"))
    other = await entry(bus, key, "observed")({})  # another writer of the bucket (the prober)
    ours, previous = await writes.write(key, entry(bus, key, "b"))
    assert previous == other.seq
    assert ours.seq > other.seq


async def test_writes_of_other_keys_between_do_not_count(bus: Bus) -> None:
    writes, key, elsewhere = KeyWrites(subjects.OBJECTS_BUCKET), fresh_key(), fresh_key()
    first, _ = await writes.write(key, entry(bus, key, "a"))
    await entry(bus, elsewhere, "a")({})
    _, previous = await writes.write(key, entry(bus, key, "b"))
    assert previous == first.seq


async def test_writes_of_one_key_at_once_go_one_after_the_other_each_checked(bus: Bus) -> None:
    writes, key = KeyWrites(subjects.OBJECTS_BUCKET), fresh_key()
    first, _ = await writes.write(key, entry(bus, key, "a"))
    done = await asyncio.gather(*(writes.write(key, entry(bus, key, name)) for name in "bcd"))
    revisions = [first.seq] + [ack.seq for ack, _ in done]
    assert [previous for _, previous in done] == revisions[:-1]


async def test_a_duplicate_proves_nothing_and_does_not_lower_what_is_known(bus: Bus) -> None:
    writes, key = KeyWrites(subjects.OBJECTS_BUCKET), fresh_key()
    await writes.write(key, entry(bus, key, "a", msg_id=f"{key.name}/a"))
    later, _ = await writes.write(key, entry(bus, key, "b"))
    again, previous = await writes.write(key, entry(bus, key, "a", msg_id=f"{key.name}/a"))
    assert again.duplicate and previous is None
    _, previous = await writes.write(key, entry(bus, key, "c"))
    assert previous == later.seq


async def test_a_key_written_before_the_projection_knew_it_is_learnt_from_the_refusal(bus: Bus) -> None:
    """A key with writes this projection does not know of (written before it started, or forgotten) is not
    taken for new: the bucket refuses the check against 0 and names its last write. A key seeded from the
    projection's load is checked against the right revision at once."""
    key = fresh_key()
    earlier = await entry(bus, key, "a")({})
    attempts: list[dict[str, str]] = []

    def counted(publish: Publish) -> Publish:
        async def attempt(checks: dict[str, str]) -> PubAck:
            attempts.append(checks)
            return await publish(checks)

        return attempt

    _, previous = await KeyWrites(subjects.OBJECTS_BUCKET).write(key, counted(entry(bus, key, "b")))
    assert previous == earlier.seq and len(attempts) == 2
    seeded = KeyWrites(subjects.OBJECTS_BUCKET)
    last = await entry(bus, key, "c")({})
    seeded.seed(key, last.seq)
    attempts.clear()
    _, previous = await seeded.write(key, counted(entry(bus, key, "d")))
    assert previous == last.seq and len(attempts) == 1
