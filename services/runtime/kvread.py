"""Batched reads of the latest KV values under a subject filter: one request, one reply stream.

A JetStream batched direct get (``multi_last``) returns the last message of every subject matching the
filter and ends with an EOB status whose ``Nats-UpTo-Sequence`` is the stream sequence the read
reflects. Used for snapshots (``snapshots.py``) and for worker membership. (nats-py's ``kv.keys`` with
filters answers "no keys" on 2.16, and a KV watch per read costs a consumer creation.)
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
from nats.aio.client import Client

from services.runtime.errors import RetryableError


@dataclass(frozen=True)
class KvRead:
    """Live (not deleted) values by key, and the stream sequence the read reflects (0 if unknown)."""

    values: dict[str, bytes]
    revision: int
    empty: bool


async def read_latest(nc: Client, bucket: str, key_filter: str, *, timeout: float = 5.0) -> KvRead:
    """Latest values of the keys of ``bucket`` matching ``key_filter`` (NATS wildcards allowed).

    Raises:
        RetryableError: no answer within ``timeout`` or an error status.
    """
    prefix = f"$KV.{bucket}."
    request = msgspec.json.encode({"multi_last": [prefix + key_filter], "batch": 100_000})
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    values: dict[str, bytes] = {}
    try:
        await nc.publish(f"$JS.API.DIRECT.GET.KV_{bucket}", request, reply=inbox)
        while True:
            try:
                msg = await sub.next_msg(timeout=timeout)
            except Exception as exc:  # nats-py TimeoutError or a closed connection
                raise RetryableError(f"KV read of {bucket}/{key_filter} got no answer") from exc
            headers = msg.headers or {}
            status = headers.get("Status")
            if status == "204":  # end of batch
                upto = headers.get("Nats-UpTo-Sequence") or headers.get("Nats-Last-Sequence") or 0
                return KvRead(values=values, revision=int(upto), empty=False)
            if status == "404":
                return KvRead(values=values, revision=0, empty=True)
            if status:
                raise RetryableError(f"KV read of {bucket}/{key_filter}: {status} {headers.get('Description', '')}")
            if headers.get("KV-Operation") in ("DEL", "PURGE"):
                continue
            values[headers["Nats-Subject"][len(prefix) :]] = msg.data
    finally:
        await sub.unsubscribe()
