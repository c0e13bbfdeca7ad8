"""Batched JetStream direct gets: every message of a stream under a subject filter, with no consumer.

A batched direct get (``{"seq", "next_by_subj", "batch"}``) answers with up to ``batch`` messages and an
EOB status carrying the number still pending, so a read is a few requests whatever the length, creates
no consumer (reading must not change the bus) and needs only ``allow_direct`` on the streams, which
raybus sets. Used by replay (a key's history), by the status service's console (Events, dead letters)
and by the reconciler worker (what of a key is still in flight when its partition moves).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import msgspec
from nats.aio.client import Client

from schema import subjects
from schema.times import format_time_exact, parse_time
from services.runtime.errors import RetryableError

DIRECT_BATCH: Final = 1000
"""Messages asked for per direct-get request (the server may answer fewer: it then reports pending)."""
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class StoredMessage:
    """A message as a direct get returns it."""

    seq: int
    time: datetime
    subject: str
    data: bytes
    headers: dict[str, str]


def _time(text: str | None) -> datetime:
    return parse_time(text) or _EPOCH


async def direct_batches(
    nc: Client,
    stream: str,
    *,
    subject_filter: str | None = None,
    start_seq: int = 1,
    start_time: datetime | None = None,
    timeout: float = 5.0,
    batch: int = DIRECT_BATCH,
) -> AsyncGenerator[StoredMessage, None]:
    """Every message of ``stream`` matching the filter from ``start_seq`` (or ``start_time``) on, asked for
    ``batch`` at a time (a reader that stops early asks for few).

    Raises:
        RetryableError: no answer within ``timeout`` or an error status.
    """
    seq = start_seq
    first = True
    while True:
        request: dict[str, Any] = {"batch": batch, "next_by_subj": subject_filter or ">"}
        if first and start_time is not None:
            request["start_time"] = format_time_exact(start_time)
        else:
            request["seq"] = seq
        first = False
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        pending = 0
        last = 0
        try:
            await nc.publish(subjects.direct_get_subject(stream), msgspec.json.encode(request), reply=inbox)
            while True:
                try:
                    msg = await sub.next_msg(timeout=timeout)
                except Exception as exc:  # nats-py's TimeoutError or a closed connection
                    raise RetryableError(f"direct get on {stream} got no answer") from exc
                headers = dict(msg.headers or {})
                status = headers.get("Status")
                if status == "204":
                    pending = int(headers.get("Nats-Num-Pending") or 0)
                    break
                if status == "404":
                    return
                if status:
                    raise RetryableError(f"direct get on {stream}: {status} {headers.get('Description', '')}")
                last = int(headers.get("Nats-Sequence") or 0)
                yield StoredMessage(
                    seq=last,
                    time=_time(headers.get("Nats-Time-Stamp")),
                    subject=headers.get("Nats-Subject", ""),
                    data=msg.data,
                    headers=headers,
                )
        finally:
            await sub.unsubscribe()
        if pending <= 0 or last == 0:
            return
        seq = last + 1
