"""Batched reads of the latest KV values under a subject filter: one request, one reply stream.

A JetStream batched direct get (``multi_last``) returns the last message of every subject matching the
filter and ends with an EOB status whose ``Nats-UpTo-Sequence`` is the stream sequence the read
reflects. The server answers at most 1,024 keys that way; a larger prefix is read in pages instead.
Used for worker membership, and (with the delete markers and each entry's revision:
:func:`read_entries`) for snapshots (``snapshots.py``) and replay's KV seed. :func:`read_changes` reads
only what was written under a filter after a known revision, delete markers included. (nats-py's
``kv.keys`` with filters answers "no keys" on 2.16, and a KV watch per read costs a consumer creation.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec
from nats.aio.client import Client

from schema import subjects
from services.runtime.errors import RetryableError

PAGE: Final = 1000
"""Messages asked for per page of a paged read."""


@dataclass(frozen=True)
class KvRead:
    """Live (not deleted) values by key, and the stream sequence the read reflects (0 if unknown)."""

    values: dict[str, bytes]
    revision: int
    empty: bool


@dataclass(frozen=True)
class KvEntry:
    """The last write of one key: its stream sequence, and its value (None for a delete or purge marker)."""

    revision: int
    value: bytes | None


@dataclass(frozen=True)
class KvEntries:
    """Every key's last write, delete markers included, and the stream sequence the read reflects."""

    entries: dict[str, KvEntry]
    revision: int
    empty: bool


async def read_latest(nc: Client, bucket: str, key_filter: str, *, timeout: float = 5.0) -> KvRead:
    """Latest values of the keys of ``bucket`` matching ``key_filter`` (NATS wildcards allowed).

    Raises:
        RetryableError: no answer within ``timeout`` or an error status.
    """
    read = await read_entries(nc, bucket, key_filter, timeout=timeout)
    values = {key: entry.value for key, entry in read.entries.items() if entry.value is not None}
    return KvRead(values=values, revision=read.revision, empty=read.empty)


async def read_entries(nc: Client, bucket: str, key_filter: str, *, timeout: float = 5.0) -> KvEntries:
    """The last write of every key of ``bucket`` matching ``key_filter``, delete markers included.

    Raises:
        RetryableError: no answer within ``timeout`` or an error status.
    """
    prefix = subjects.kv_subject(bucket)
    request = {"multi_last": [prefix + key_filter], "batch": 100_000}
    entries: dict[str, KvEntry] = {}
    status, headers = await _direct_get(nc, bucket, request, prefix, entries, timeout=timeout)
    if status == "204":  # end of batch
        upto = headers.get("Nats-UpTo-Sequence") or headers.get("Nats-Last-Sequence") or 0
        return KvEntries(entries=entries, revision=int(upto), empty=False)
    if status == "404":
        return KvEntries(entries=entries, revision=0, empty=True)
    if status == "413":  # more keys than one multi_last answers
        return await _read_paged(nc, bucket, key_filter, timeout=timeout)
    raise RetryableError(f"KV read of {bucket}/{key_filter}: {status} {headers.get('Description', '')}")


async def read_changes(nc: Client, bucket: str, key_filter: str, *, after: int, timeout: float = 5.0) -> KvEntries:
    """The last write of every key of ``bucket`` matching ``key_filter`` written after stream sequence
    ``after``, delete markers included; the read reflects every write of the filter up to its revision
    (``after`` if nothing newer was found).

    Raises:
        RetryableError: no answer within ``timeout`` or an error status.
    """
    return await _read_paged(nc, bucket, key_filter, timeout=timeout, after=after)


async def _read_paged(nc: Client, bucket: str, key_filter: str, *, timeout: float, after: int = 0) -> KvEntries:
    """The same read as pages of the bucket's stream in sequence order, from sequence ``after + 1`` (the
    server answers a multi_last with at most 1,024 keys; a RayCluster of 2,000 workers has more entries).

    A bucket with history 1 holds one message per key, so reading the filter's messages upwards to the end
    gives every key's latest value written after ``after``: a write made meanwhile has a higher sequence
    than anything already passed, so it is read too. The read reflects the highest sequence it saw.
    """
    prefix = subjects.kv_subject(bucket)
    entries: dict[str, KvEntry] = {}
    read_up_to = after
    while True:
        request = {"seq": read_up_to + 1, "next_by_subj": prefix + key_filter, "batch": PAGE}
        status, headers = await _direct_get(nc, bucket, request, prefix, entries, timeout=timeout)
        last_read = int(headers["Nats-Last-Read"])
        if status == "404" or (status == "204" and (last_read == 0 or int(headers.get("Nats-Num-Pending") or 0) <= 0)):
            read_up_to = max(read_up_to, last_read)
            return KvEntries(entries=entries, revision=read_up_to, empty=read_up_to == 0)
        if status != "204":
            raise RetryableError(f"KV read of {bucket}/{key_filter}: {status} {headers.get('Description', '')}")
        read_up_to = last_read


async def _direct_get(
    nc: Client,
    bucket: str,
    request: dict[str, object],
    prefix: str,
    entries: dict[str, KvEntry],
    *,
    timeout: float,
) -> tuple[str, dict[str, str]]:
    """Send one batched direct get; put each key's write into ``entries`` (a later sequence replaces an
    earlier one); return the final status and headers, ``Nats-Last-Read`` set to the answer's highest
    message sequence."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    last_read = 0
    try:
        await nc.publish(
            subjects.direct_get_subject(subjects.kv_stream(bucket)), msgspec.json.encode(request), reply=inbox
        )
        while True:
            try:
                msg = await sub.next_msg(timeout=timeout)
            except Exception as exc:  # nats-py TimeoutError or a closed connection
                raise RetryableError(f"KV read of {bucket} got no answer") from exc
            headers = dict(msg.headers or {})
            status = headers.get("Status")
            if status:
                headers["Nats-Last-Read"] = str(last_read)
                return status, headers
            seq = int(headers.get("Nats-Sequence") or 0)
            last_read = max(last_read, seq)
            deleted = headers.get("KV-Operation") in ("DEL", "PURGE")
            entries[headers["Nats-Subject"][len(prefix) :]] = KvEntry(revision=seq, value=None if deleted else msg.data)
    finally:
        await sub.unsubscribe()
