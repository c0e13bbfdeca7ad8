"""Snapshot reads: keys held between reads, only the changes read, always what a whole read gives
(against a real nats-server)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import msgspec
import pytest
from nats.aio.client import Client
from nats.js.kv import KV_DEL, KV_OP, KeyValue

from schema import subjects
from schema.decision import Snapshot
from schema.keys import ReconcileKey
from services.runtime.errors import RetryableError
from services.runtime.snapshots import HELD_FOR, HELD_FROM, SnapshotReader, Write
from tests.helpers import ManualClock

KEY = ReconcileKey(kind="RayCluster", namespace="default", name="big")
OTHER = ReconcileKey(kind="RayCluster", namespace="default", name="small")


async def put(kv: KeyValue, key: ReconcileKey, kind: str, name: str, value: object) -> int:
    return await kv.put(subjects.entry_key(key, kind, name), msgspec.json.encode(value))


async def remove(nc: Client, key: ReconcileKey, kind: str, name: str) -> int:
    """Delete an entry; the revision of its delete marker."""
    subject = subjects.kv_subject(subjects.OBJECTS_BUCKET, subjects.entry_key(key, kind, name))
    return (await nc.jetstream().publish(subject, headers={KV_OP: KV_DEL})).seq


async def whole(nc: Client, key: ReconcileKey, revision: int) -> Snapshot:
    """What a reader that holds nothing reads."""
    return await SnapshotReader(nc).read(key, min_revision=revision)


async def test_a_large_key_is_read_whole_once_then_only_its_changes(objects: tuple[Client, KeyValue]) -> None:
    nc, kv = objects
    await put(kv, KEY, "RayCluster", KEY.name, {"spec": 1})
    for i in range(HELD_FROM):
        await put(kv, KEY, "Pod", f"w-{i}", {"i": i})
    clock = ManualClock()
    reader = SnapshotReader(nc, clock=clock)
    first = await reader.read(KEY)
    assert len(first.entries["Pod"]) == HELD_FROM and reader.whole_reads == 1

    await put(kv, KEY, "Pod", "w-1", {"i": "again"})
    await kv.delete(subjects.entry_key(KEY, "Pod", "w-2"))
    await put(kv, OTHER, "Pod", "x", {})  # another key's write in between
    await put(kv, KEY, "Pod", "w-new", {"i": "new"})
    await put(kv, KEY, "Event", "e", {"e": 1})
    rev = await kv.delete(subjects.entry_key(KEY, "Pod", "w-3"))
    second = await reader.read(KEY, min_revision=rev)
    assert reader.whole_reads == 1
    assert second.entries == (await whole(nc, KEY, rev)).entries
    assert second.revision >= rev
    assert second.entries["Pod"]["w-1"] == {"i": "again"} and "w-2" not in second.entries["Pod"]
    assert second.get("Pod", "w-0") is first.get("Pod", "w-0")  # decoded once
    # What was handed out before stays as it was read.
    assert first.entries["Pod"]["w-1"] == {"i": 1} and "w-2" in first.entries["Pod"] and "Event" not in first.entries

    unchanged = await reader.read(KEY, min_revision=rev)
    assert unchanged.entries == second.entries and unchanged.revision == second.revision
    assert reader.whole_reads == 1


async def test_a_held_key_is_read_whole_again_after_a_while_reusing_what_did_not_change(
    objects: tuple[Client, KeyValue],
) -> None:
    nc, kv = objects
    for i in range(HELD_FROM):
        await put(kv, KEY, "Pod", f"w-{i}", {"i": i})
    clock = ManualClock()
    reader = SnapshotReader(nc, clock=clock)
    first = await reader.read(KEY)
    rev = await put(kv, KEY, "Pod", "w-0", {"i": "changed"})
    clock.now = HELD_FOR
    again = await reader.read(KEY, min_revision=rev)
    assert reader.whole_reads == 2
    assert again.entries == (await whole(nc, KEY, rev)).entries
    assert again.get("Pod", "w-1") is first.get("Pod", "w-1")
    assert again.get("Pod", "w-0") == {"i": "changed"}


@pytest.mark.parametrize(("writes_between", "whole_reads"), [(0, 1), (3, 2)], ids=["quiet", "busy"])
async def test_a_small_key_is_held_and_only_its_changes_read_while_the_bucket_is_quiet(
    objects: tuple[Client, KeyValue], writes_between: int, whole_reads: int
) -> None:
    # The server finds a key's changes by walking the bucket's writes since the held revision: after
    # many writes to other keys, the whole key is the cheaper read (still reusing what did not change).
    nc, kv = objects
    rev = await put(kv, OTHER, "Pod", "p", {"p": 1})
    await put(kv, OTHER, "Pod", "q", {"q": 1})
    reader = SnapshotReader(nc, changes_within=3)
    first = await reader.read(OTHER, min_revision=rev)
    for i in range(writes_between):
        await put(kv, KEY, "Pod", f"w-{i}", {"i": i})
    rev = await put(kv, OTHER, "Pod", "p", {"p": 2})
    snapshot = await reader.read(OTHER, min_revision=rev)
    assert reader.whole_reads == whole_reads and snapshot.get("Pod", "p") == {"p": 2}
    assert snapshot.entries == (await whole(nc, OTHER, rev)).entries
    assert snapshot.get("Pod", "q") is first.get("Pod", "q")  # decoded once
    # An input that names no revision (a timer tick) says nothing of the bucket: read whole.
    await reader.read(OTHER)
    assert reader.whole_reads == whole_reads + 1


async def test_small_keys_are_held_within_a_budget_of_their_own(objects: tuple[Client, KeyValue]) -> None:
    nc, kv = objects
    keys = [ReconcileKey(kind="RayCluster", namespace="default", name=f"c{i}") for i in range(4)]
    revisions = {}
    for key in keys:
        for i in range(2):
            revisions[key] = await put(kv, key, "Pod", f"w-{i}", {"i": i})
    reader = SnapshotReader(nc, small_held_entries=4, small_packed_bytes=0, changes_within=100)
    for key in keys:
        await reader.read(key, min_revision=revisions[key])
    assert reader.whole_reads == 4
    # 8 entries read, 4 may be held: the last two keys are, and one more encoded (a key larger than the
    # encoded budget is still kept); the first is read whole again.
    for key in reversed(keys):
        await reader.read(key, min_revision=revisions[key])
    assert reader.whole_reads == 5


async def test_small_keys_let_go_are_kept_encoded(objects: tuple[Client, KeyValue]) -> None:
    """A burst over more keys than the decoded budget holds, reconciled in turn, reads each key whole once:
    the keys let go are decoded again from their JSON, and give what a whole read gives."""
    nc, kv = objects
    keys = [ReconcileKey(kind="RayCluster", namespace="default", name=f"b{i}") for i in range(6)]
    revisions = {}
    for key in keys:
        await put(kv, key, "RayCluster", key.name, {"spec": {"n": key.name}})
        revisions[key] = await put(kv, key, "Pod", "w-0", {"i": 0, "l": [1, "x", None, 1.5]})
    reader = SnapshotReader(nc, small_held_entries=4, changes_within=10_000)
    first = {key: await reader.read(key, min_revision=revisions[key]) for key in keys}
    assert reader.whole_reads == len(keys)
    revisions[keys[0]] = await put(kv, keys[0], "Pod", "w-1", {"i": 1})  # a change to a key kept encoded
    for _ in range(2):
        for key in keys:
            snapshot = await reader.read(key, min_revision=revisions[key])
            assert snapshot.entries == (await whole(nc, key, revisions[key])).entries
            assert snapshot.revision >= revisions[key]
    assert reader.whole_reads == len(keys)
    assert first[keys[1]].entries == (await reader.read(keys[1], min_revision=revisions[keys[1]])).entries
    reader.forget(lambda key: key == keys[2])
    await reader.read(keys[2], min_revision=revisions[keys[2]])
    assert reader.whole_reads == len(keys) + 1


async def test_a_key_that_shrank_below_the_large_ones_and_was_let_go_is_kept_whole(
    objects: tuple[Client, KeyValue],
) -> None:
    """A large key is held without the JSON of its entries; once it has shrunk to a small key and is let
    go, its entries are encoded again from the decoded ones."""
    nc, kv = objects
    key = ReconcileKey(kind="RayCluster", namespace="default", name="shrinks")
    previous = 0
    for index in range(5):
        previous = await put(kv, key, "Pod", f"w-{index}", {"i": index})
    reader = SnapshotReader(nc, held_from=4, small_held_entries=3)
    await reader.read(key, min_revision=previous)
    for index in (2, 3, 4):
        name = f"w-{index}"
        revision = await remove(nc, key, "Pod", name)
        await reader.read(key, min_revision=revision, writes=[carried((previous, revision), name, None)])
        previous = revision
    added = await put(kv, key, "Pod", "w-9", {"i": 9})
    await reader.read(key, min_revision=added, writes=[carried((previous, added), "w-9", {"i": 9})])
    await reader.read(OTHER, min_revision=await put(kv, OTHER, "Pod", "p", {"p": 1}))  # lets the key go
    assert reader.whole_reads == 2 and reader.applied_writes == 4
    again = await reader.read(key, min_revision=added)
    assert reader.whole_reads == 2
    assert again.entries == (await whole(nc, key, added)).entries == {"Pod": {f"w-{i}": {"i": i} for i in (0, 1, 9)}}


async def test_a_read_behind_the_revision_asked_for_is_retried_whole(objects: tuple[Client, KeyValue]) -> None:
    nc, kv = objects
    for i in range(HELD_FROM):
        rev = await put(kv, KEY, "Pod", f"w-{i}", {"i": i})
    reader = SnapshotReader(nc)
    await reader.read(KEY)
    with pytest.raises(RetryableError, match="did not reach revision"):
        await reader.read(KEY, min_revision=rev + 1000, attempts=3)
    # The first attempt read the changes; the key is no longer held, so the others read it whole.
    assert reader.whole_reads == 3


async def test_the_least_recently_read_keys_are_let_go_beyond_the_bound(objects: tuple[Client, KeyValue]) -> None:
    nc, kv = objects
    keys = [ReconcileKey(kind="RayCluster", namespace="default", name=f"c{i}") for i in range(4)]
    for key in keys:
        for i in range(4):
            await put(kv, key, "Pod", f"w-{i}", {"i": i})
    reader = SnapshotReader(nc, held_from=3, held_entries=10)
    for key in keys:
        await reader.read(key)
    assert reader.whole_reads == 4
    # 16 entries read, 10 may be held: the last two keys are, the first two are read whole again.
    for key in reversed(keys):
        await reader.read(key)
    assert reader.whole_reads == 6


async def test_a_forgotten_key_is_read_whole_at_the_revision_of_now(objects: tuple[Client, KeyValue]) -> None:
    # A partition that comes back: another reader may have decided its keys on a later revision meanwhile,
    # so a decision here must not carry the revision this reader held, even though nothing changed.
    nc, kv = objects
    for i in range(HELD_FROM):
        await put(kv, KEY, "Pod", f"w-{i}", {"i": i})
    reader = SnapshotReader(nc, clock=ManualClock())
    held = await reader.read(KEY)
    later = await put(kv, OTHER, "Pod", "x", {})  # the bucket moves on; this key does not
    assert (await reader.read(KEY)).revision == held.revision

    reader.forget(lambda key: key == KEY)
    again = await reader.read(KEY)
    assert reader.whole_reads == 2
    assert again.revision >= later and again.entries == held.entries


def carried(key_rev: tuple[int, int], name: str, value: dict[str, object] | None) -> Write:
    """The write of Pod ``name`` at revision ``key_rev[1]``, the key's previous write being ``key_rev[0]``."""
    previous, revision = key_rev
    return Write(
        revision=revision,
        previous=previous,
        entry_kind="Pod",
        name=name,
        encoded=None if value is None else partial(msgspec.json.encode, value),
    )


async def test_writes_chained_on_from_the_held_revision_are_applied_without_a_read(
    objects: tuple[Client, KeyValue],
) -> None:
    nc, kv = objects
    first = await put(kv, OTHER, "Pod", "p", {"p": 1})
    await put(kv, OTHER, "Pod", "q", {"q": 1})
    reader = SnapshotReader(nc)
    held = await reader.read(OTHER, min_revision=first)
    await put(kv, KEY, "Pod", "elsewhere", {})  # another key's write: not a gap
    last = (await kv.get(subjects.entry_key(OTHER, "Pod", "q"))).revision
    assert last is not None
    p2 = await put(kv, OTHER, "Pod", "p", {"p": 2})
    gone = await remove(nc, OTHER, "Pod", "q")
    writes = [carried((p2, gone), "q", None), carried((last, p2), "p", {"p": 2})]  # in any order

    snapshot = await reader.read(OTHER, min_revision=gone, writes=writes)
    assert reader.applied_writes == 1 and reader.whole_reads == 1
    assert snapshot.revision == gone and snapshot.revision > held.revision
    assert snapshot.entries == (await whole(nc, OTHER, gone)).entries
    # What the reader holds now is what it applied: a write chained on from it needs no read either.
    p3 = await put(kv, OTHER, "Pod", "p", {"p": 3})
    again = await reader.read(OTHER, min_revision=p3, writes=[carried((gone, p3), "p", {"p": 3})])
    assert reader.applied_writes == 2 and again.get("Pod", "p") == {"p": 3}


async def holding_p(objects: tuple[Client, KeyValue]) -> tuple[SnapshotReader, int]:
    """A reader that read ``OTHER`` once its Pod ``p`` was written, and the revision of that write."""
    nc, kv = objects
    first = await put(kv, OTHER, "Pod", "p", {"p": 1})
    reader = SnapshotReader(nc)
    await reader.read(OTHER, min_revision=first)
    return reader, first


async def test_of_several_writes_of_one_entry_only_the_last_is_decoded_and_the_order_is_kept(
    objects: tuple[Client, KeyValue],
) -> None:
    nc, kv = objects
    reader, first = await holding_p(objects)
    decoded: list[str] = []

    def write(key_rev: tuple[int, int], name: str, value: dict[str, object] | None) -> Write:
        def encoded() -> bytes:
            decoded.append(f"{name}{key_rev[1]}")
            return msgspec.json.encode(value)

        return replace(carried(key_rev, name, value), encoded=None if value is None else encoded)

    q1 = await put(kv, OTHER, "Pod", "q", {"q": 1})
    p2 = await put(kv, OTHER, "Pod", "p", {"p": 2})
    gone = await remove(nc, OTHER, "Pod", "p")
    p3 = await put(kv, OTHER, "Pod", "p", {"p": 3})  # created again: after q now
    q2 = await put(kv, OTHER, "Pod", "q", {"q": 2})
    writes = [
        write((first, q1), "q", {"q": 1}),
        write((q1, p2), "p", {"p": 2}),
        write((p2, gone), "p", None),
        write((gone, p3), "p", {"p": 3}),
        write((p3, q2), "q", {"q": 2}),
    ]

    snapshot = await reader.read(OTHER, min_revision=q2, writes=writes)
    assert reader.applied_writes == 1 and reader.whole_reads == 1
    assert sorted(decoded) == [f"p{p3}", f"q{q2}"]
    assert list(snapshot.entries["Pod"].items()) == [("q", {"q": 2}), ("p", {"p": 3})]
    assert snapshot.entries == (await whole(nc, OTHER, q2)).entries


async def test_writes_with_a_gap_before_them_are_not_applied_the_key_is_read(
    objects: tuple[Client, KeyValue],
) -> None:
    kv = objects[1]
    reader, _ = await holding_p(objects)
    unseen = await put(kv, OTHER, "Pod", "q", {"q": 1})  # a write no input carries
    p2 = await put(kv, OTHER, "Pod", "p", {"p": 2})

    snapshot = await reader.read(OTHER, min_revision=p2, writes=[carried((unseen, p2), "p", {"p": 2})])
    assert reader.applied_writes == 0
    assert snapshot.get("Pod", "q") == {"q": 1} and snapshot.get("Pod", "p") == {"p": 2}


async def test_a_key_not_held_or_held_too_long_is_read_whatever_the_writes(objects: tuple[Client, KeyValue]) -> None:
    nc, kv = objects
    before = await put(kv, OTHER, "Pod", "q", {"q": 1})
    first = await put(kv, OTHER, "Pod", "p", {"p": 1})
    clock = ManualClock()
    reader = SnapshotReader(nc, clock=clock)
    await reader.read(OTHER, min_revision=first, writes=[carried((before, first), "p", {"p": 1})])
    assert reader.applied_writes == 0 and reader.whole_reads == 1
    clock.now += HELD_FOR
    p2 = await put(kv, OTHER, "Pod", "p", {"p": 2})
    await reader.read(OTHER, min_revision=p2, writes=[carried((first, p2), "p", {"p": 2})])
    assert reader.applied_writes == 0 and reader.whole_reads == 2


async def test_a_key_not_held_is_had_from_a_chain_of_writes_from_revision_0(objects: tuple[Client, KeyValue]) -> None:
    """The first write of a new key proves nothing was under it (``kv_previous`` 0): its object alone is
    the key's snapshot. A chain that starts later needs a read."""
    nc, kv = objects
    key = ReconcileKey(kind="RayCluster", namespace="default", name="new")
    cluster = {"spec": {"new": True}}
    first = await put(kv, key, "RayCluster", key.name, cluster)
    reader = SnapshotReader(nc)
    snapshot = await reader.read(
        key, min_revision=first, writes=[Write(first, 0, "RayCluster", key.name, partial(msgspec.json.encode, cluster))]
    )
    assert reader.whole_reads == 0 and reader.applied_writes == 1
    assert snapshot.entries == (await whole(nc, key, first)).entries and snapshot.revision == first
    second = await put(kv, key, "Pod", "head", {"p": 1})
    other = SnapshotReader(nc)
    await other.read(
        key, min_revision=second, writes=[Write(second, first, "Pod", "head", partial(msgspec.json.encode, {"p": 1}))]
    )
    assert other.whole_reads == 1 and other.applied_writes == 0
