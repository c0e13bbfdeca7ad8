"""What the console shows of the bus: partitions with their owner and lag, the live workers, dead letters.

Read-only and consumer-free: leases and heartbeats with KV direct gets, lag from each partition
consumer's info (messages not yet delivered plus delivered but not acked), the latest dead letters with
message gets on ``RAYBUS_DEADLETTER``. A partition whose consumer does not exist yet shows no lag.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from schema import subjects
from schema.codec import decode_deadletter
from schema.keys import decode_token
from services.runtime.errors import RetryableError
from services.runtime.kvread import read_latest

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEAD_LETTERS_SHOWN = 50
_RECONCILERS: subjects.LeaseGroup = "reconcile"
"""The group whose partition owners the view shows: the reconcilers (the console's "workers")."""
"""The latest dead letters the console lists."""


class PartitionOut(msgspec.Struct, frozen=True, kw_only=True):
    """One partition of the events stream."""

    partition: int
    owner: str
    """Worker id holding the lease ("" when none does)."""
    pending: int | None
    """Stored messages not yet delivered to the partition's consumer (null: no consumer)."""
    ack_pending: int | None
    """Delivered, not yet acked."""
    lag: int | None
    """``pending + ack_pending``."""


class DeadLetterOut(msgspec.Struct, frozen=True, kw_only=True):
    """One parked message and why."""

    seq: int
    at: datetime
    stream: str
    subject: str
    sequence: int
    deliveries: int
    reason: str
    size: int


class BusOut(msgspec.Struct, frozen=True, kw_only=True):
    """The bus as the console shows it."""

    partitions: list[PartitionOut]
    workers: list[str]
    dead_letters: list[DeadLetterOut]
    dead_letters_total: int


async def _partition(nc: Client, partition: int, owner: str) -> PartitionOut:
    try:
        info = await nc.jetstream().consumer_info(subjects.EVENTS_STREAM, subjects.partition_consumer(partition))
    except nats.js.errors.NotFoundError:
        return PartitionOut(partition=partition, owner=owner, pending=None, ack_pending=None, lag=None)
    pending, ack_pending = int(info.num_pending or 0), int(info.num_ack_pending or 0)
    return PartitionOut(
        partition=partition, owner=owner, pending=pending, ack_pending=ack_pending, lag=pending + ack_pending
    )


def _letter(seq: int, data: bytes, subject: str) -> DeadLetterOut:
    try:
        letter = decode_deadletter(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return DeadLetterOut(
            seq=seq, at=EPOCH, stream="", subject=subject, sequence=0, deliveries=0,
            reason=f"undecodable dead letter: {exc}", size=len(data),
        )  # fmt: skip
    return DeadLetterOut(
        seq=seq,
        at=letter.at,
        stream=letter.stream,
        subject=letter.subject,
        sequence=letter.sequence,
        deliveries=letter.deliveries,
        reason=letter.error,
        size=len(letter.payload),
    )


async def _dead_letters(nc: Client) -> tuple[list[DeadLetterOut], int]:
    # The dead-letter stream does not allow direct gets; the latest few are read one by one.
    js = nc.jetstream()
    state = (await js.stream_info(subjects.DEADLETTER_STREAM)).state
    if not state.messages:
        return [], 0
    letters: list[DeadLetterOut] = []
    seq = int(state.last_seq or 0)
    while seq >= int(state.first_seq or 1) and len(letters) < DEAD_LETTERS_SHOWN:
        try:
            stored = await js.get_msg(subjects.DEADLETTER_STREAM, seq)
        except nats.js.errors.NotFoundError:
            seq -= 1
            continue  # deleted from the stream
        letters.append(_letter(seq, stored.data or b"", stored.subject or ""))
        seq -= 1
    return letters, int(state.messages)


async def bus_view(nc: Client, *, partitions: int) -> BusOut:
    """Partitions, owners, lag and the latest dead letters (newest first).

    Raises:
        RetryableError: NATS did not answer.
    """
    try:
        leases = (await read_latest(nc, subjects.LEASES_BUCKET, ">")).values
        members = await read_latest(nc, subjects.LEASES_BUCKET, subjects.heartbeats_filter(_RECONCILERS))
        rows = [
            await _partition(nc, p, leases.get(subjects.lease_key(_RECONCILERS, p), b"").decode(errors="replace"))
            for p in range(partitions)
        ]
        letters, total = await _dead_letters(nc)
    except nats.errors.Error as exc:
        raise RetryableError(f"NATS: {exc or type(exc).__name__}") from exc
    workers = sorted(decode_token(k.split(".", 2)[2]) for k in members.values)
    return BusOut(partitions=rows, workers=workers, dead_letters=letters, dead_letters_total=total)
