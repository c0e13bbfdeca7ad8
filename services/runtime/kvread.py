"""Batched reads of the latest KV values under a subject filter: one request, one reply stream.

A JetStream batched direct get (``multi_last``) returns the last message of every subject matching the
filter and ends with an EOB status whose ``Nats-UpTo-Sequence`` is the stream sequence the read
reflects. The server answers at most 1,024 keys that way; a larger prefix is read in pages instead.
Used for worker membership, and (with the delete markers and each entry's revision:
:meth:`KvReader.entries`) for snapshots (``snapshots.py``) and replay's KV seed. :meth:`KvReader.changes` reads
only what was written under a filter after a known revision, delete markers included. (nats-py's
``kv.keys`` with filters answers "no keys" on 2.16, and a KV watch per read costs a consumer creation.)

A :class:`KvReader` receives every answer on one wildcard reply subscription for its whole life, each
read on a subject of its own under it: a reader that reads for every decision (``snapshots.py``) would
otherwise subscribe and unsubscribe a reply inbox per read, and wait for each reply message with a timer
of its own. The module's functions read once through a reader of their own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Final

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.kv import KV_DEL, KV_OP, KV_PURGE

from schema import subjects
from services.runtime.errors import RetryableError
from services.runtime.replies import Replies

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


def deleted(headers: Mapping[str, str] | None) -> bool:
    """Whether a KV message with these headers is a delete marker or a purge (``KV-Operation``)."""
    return (headers or {}).get(KV_OP) in (KV_DEL, KV_PURGE)


class _Answer:
    """One direct get's answer as its messages arrive: entries taken, then the final status."""

    __slots__ = ("done", "entries", "heard_at", "last_read", "prefix")

    def __init__(
        self, prefix: str, entries: dict[str, KvEntry], now: float, done: asyncio.Future[dict[str, str]]
    ) -> None:
        self.prefix = prefix
        self.entries = entries
        self.last_read = 0
        self.heard_at = now
        self.done = done

    def take(self, msg: Msg, now: float) -> None:
        """One message of the answer: an entry (a later sequence replaces an earlier one), or the status
        that ends it (its headers, ``Nats-Last-Read`` set to the answer's highest message sequence)."""
        self.heard_at = now
        headers = msg.headers or {}
        if headers.get("Status"):
            if not self.done.done():
                self.done.set_result({**headers, "Nats-Last-Read": str(self.last_read)})
            return
        subject, seq = headers.get("Nats-Subject", ""), headers.get("Nats-Sequence", "")
        if not subject.startswith(self.prefix) or not seq.isdigit():
            if not self.done.done():
                self.done.set_exception(RetryableError(f"KV read got a message that is no entry: {headers}"))
            return
        self.last_read = max(self.last_read, int(seq))
        value = None if deleted(headers) else msg.data
        self.entries[subject[len(self.prefix) :]] = KvEntry(revision=int(seq), value=value)


class KvReader:
    """Batched reads of one connection's KV buckets, answered on one reply subscription (module docstring).

    It subscribes at its first read and unsubscribes at :meth:`close` (or with the connection).
    """

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._replies: Replies[_Answer] = Replies(nc, _take)

    async def __aenter__(self) -> KvReader:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop receiving answers; a read under way gets none more."""
        await self._replies.close()

    async def latest(self, bucket: str, key_filter: str, *, timeout: float = 5.0) -> KvRead:
        """Latest values of the keys of ``bucket`` matching ``key_filter`` (NATS wildcards allowed).

        Raises:
            RetryableError: no answer within ``timeout`` or an error status.
        """
        read = await self.entries(bucket, key_filter, timeout=timeout)
        values = {key: entry.value for key, entry in read.entries.items() if entry.value is not None}
        return KvRead(values=values, revision=read.revision, empty=read.empty)

    async def entries(self, bucket: str, key_filter: str, *, timeout: float = 5.0) -> KvEntries:
        """The last write of every key of ``bucket`` matching ``key_filter``, delete markers included.

        Raises:
            RetryableError: no answer within ``timeout`` or an error status.
        """
        prefix = subjects.kv_subject(bucket)
        request = {"multi_last": [prefix + key_filter], "batch": 100_000}
        entries: dict[str, KvEntry] = {}
        headers = await self._direct_get(bucket, request, prefix, entries, timeout=timeout)
        status = headers["Status"]
        if status == "204":  # end of batch
            upto = headers.get("Nats-UpTo-Sequence") or headers.get("Nats-Last-Sequence") or 0
            return KvEntries(entries=entries, revision=int(upto), empty=False)
        if status == "404":
            return KvEntries(entries=entries, revision=0, empty=True)
        if status == "413":  # more keys than one multi_last answers
            return await self._paged(bucket, key_filter, timeout=timeout)
        raise RetryableError(f"KV read of {bucket}/{key_filter}: {status} {headers.get('Description', '')}")

    async def changes(self, bucket: str, key_filter: str, *, after: int, timeout: float = 5.0) -> KvEntries:
        """The last write of every key of ``bucket`` matching ``key_filter`` written after stream sequence
        ``after``, delete markers included; the read reflects every write of the filter up to its revision
        (``after`` if nothing newer was found).

        Raises:
            RetryableError: no answer within ``timeout`` or an error status.
        """
        return await self._paged(bucket, key_filter, timeout=timeout, after=after)

    async def _paged(self, bucket: str, key_filter: str, *, timeout: float, after: int = 0) -> KvEntries:
        """The same read as pages of the bucket's stream in sequence order, from sequence ``after + 1`` (the
        server answers a multi_last with at most 1,024 keys; a RayCluster of 2,000 workers has more entries).

        A bucket with history 1 holds one message per key, so reading the filter's messages upwards to the
        end gives every key's latest value written after ``after``: a write made meanwhile has a higher
        sequence than anything already passed, so it is read too. The read reflects the highest sequence it
        saw.
        """
        prefix = subjects.kv_subject(bucket)
        entries: dict[str, KvEntry] = {}
        read_up_to = after
        while True:
            request = {"seq": read_up_to + 1, "next_by_subj": prefix + key_filter, "batch": PAGE}
            headers = await self._direct_get(bucket, request, prefix, entries, timeout=timeout)
            status = headers["Status"]
            last_read = int(headers["Nats-Last-Read"])
            pending = int(headers.get("Nats-Num-Pending") or 0)
            if status == "404" or (status == "204" and (last_read == 0 or pending <= 0)):
                read_up_to = max(read_up_to, last_read)
                return KvEntries(entries=entries, revision=read_up_to, empty=read_up_to == 0)
            if status != "204":
                raise RetryableError(f"KV read of {bucket}/{key_filter}: {status} {headers.get('Description', '')}")
            read_up_to = last_read

    async def _direct_get(
        self, bucket: str, request: dict[str, object], prefix: str, entries: dict[str, KvEntry], *, timeout: float
    ) -> dict[str, str]:
        """Send one batched direct get; put each key's write into ``entries``; return the final status
        message's headers. ``timeout`` bounds the wait for each message of the answer, not the whole."""
        answer = _Answer(prefix, entries, time.monotonic(), asyncio.get_running_loop().create_future())
        reply = await self._replies.open(answer)
        try:
            subject = subjects.direct_get_subject(subjects.kv_stream(bucket))
            await self._nc.publish(subject, msgspec.json.encode(request), reply=reply)
            while True:
                silent = time.monotonic() - answer.heard_at
                if silent >= timeout:
                    raise RetryableError(f"KV read of {bucket} got no answer")
                await asyncio.wait((answer.done,), timeout=timeout - silent)
                if answer.done.done():
                    return answer.done.result()  # or raises what ended the answer
        finally:
            self._replies.drop(reply)
            answer.done.cancel()


def _take(answer: _Answer, msg: Msg) -> None:
    answer.take(msg, time.monotonic())


async def read_latest(nc: Client, bucket: str, key_filter: str, *, timeout: float = 5.0) -> KvRead:
    """:meth:`KvReader.latest` on a reader of its own."""
    async with KvReader(nc) as reader:
        return await reader.latest(bucket, key_filter, timeout=timeout)


async def read_entries(nc: Client, bucket: str, key_filter: str, *, timeout: float = 5.0) -> KvEntries:
    """:meth:`KvReader.entries` on a reader of its own."""
    async with KvReader(nc) as reader:
        return await reader.entries(bucket, key_filter, timeout=timeout)
