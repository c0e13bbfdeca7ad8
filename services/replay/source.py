"""Reading a key's recorded history from JetStream with batched direct gets (no consumer at all).

Role: the replayer's only adapter to NATS. Per key it reads, in this order, the decisions
(``RAYBUS_COMMANDS``, subject ``raybus.cmd.<key>``), then the inputs (``RAYBUS_EVENTS``, stored subjects
``raybus.part.*.<key>``), so every KV write a decision read already has its event in what was read (the
watcher publishes an event right after its KV write). When the events stream has dropped old messages,
it also reads the KV seed: the last write of every entry under the key's prefix, delete markers
included, with its revision.

A batched direct get (``{"seq", "next_by_subj", "batch"}``) answers with up to ``batch`` messages and an
EOB status carrying the number still pending, so a read is a few requests whatever the history length,
creates no consumer (never a durable: reading history must not change the bus) and needs only
``allow_direct`` on the streams, which raybus sets.

Not here: decoding errors are not fatal (an undecodable message is counted and skipped); replaying.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import msgspec
from nats.aio.client import Client

from schema import subjects
from schema.codec import decode_batch, decode_input
from schema.keys import ReconcileKey, decode_token
from services.replay.history import HistoryWindow, KeyHistory, KvSeedEntry, RecordedDecision, RecordedInput
from services.runtime.errors import RetryableError

log = logging.getLogger(__name__)

DIRECT_BATCH: Final = 1000
"""Messages asked for per direct-get request (the server may answer fewer: it then reports pending)."""
_json: Final[msgspec.json.Decoder[dict[str, Any]]] = msgspec.json.Decoder(dict[str, Any])
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def stored_events_filter(key: ReconcileKey) -> str:
    """Filter of ``key``'s inputs as the events stream stores them (any partition)."""
    return f"{subjects.PREFIX}.part.*.{key.token()}"


@dataclass(frozen=True)
class StoredMessage:
    """A message as a direct get returns it."""

    seq: int
    time: datetime
    subject: str
    data: bytes
    headers: dict[str, str]


def _time(text: str | None) -> datetime:
    if not text:
        return _EPOCH
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return _EPOCH


async def direct_batches(
    nc: Client,
    stream: str,
    *,
    subject_filter: str | None = None,
    start_seq: int = 1,
    start_time: datetime | None = None,
    multi_last: str | None = None,
    timeout: float = 5.0,
) -> AsyncIterator[StoredMessage]:
    """Every message of ``stream`` matching the filter from ``start_seq`` (or ``start_time``) on.

    With ``multi_last``, the last message of every subject matching it instead (KV reads).

    Raises:
        RetryableError: no answer within ``timeout`` or an error status.
    """
    seq = start_seq
    first = True
    while True:
        request: dict[str, Any] = {"batch": DIRECT_BATCH}
        if multi_last is not None:
            request = {"multi_last": [multi_last], "batch": 100_000}
        else:
            request["next_by_subj"] = subject_filter or ">"
            if first and start_time is not None:
                request["start_time"] = start_time.astimezone(UTC).isoformat().replace("+00:00", "Z")
            else:
                request["seq"] = seq
        first = False
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        pending = 0
        last = 0
        try:
            await nc.publish(f"$JS.API.DIRECT.GET.{stream}", msgspec.json.encode(request), reply=inbox)
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
        if multi_last is not None or pending <= 0 or last == 0:
            return
        seq = last + 1


async def read_window(nc: Client) -> HistoryWindow:
    """Where the events and commands streams' retained data starts."""
    js = nc.jetstream()
    found: dict[str, tuple[int, datetime | None]] = {}
    for stream in (subjects.EVENTS_STREAM, subjects.COMMANDS_STREAM):
        info = await js.stream_info(stream)
        first_seq = int(info.state.first_seq or 1)
        first_time: datetime | None = None
        if info.state.messages:
            async for stored in direct_batches(nc, stream, start_seq=first_seq):
                first_time = stored.time
                break
        found[stream] = (first_seq, first_time)
    events_first, events_time = found[subjects.EVENTS_STREAM]
    commands_first, commands_time = found[subjects.COMMANDS_STREAM]
    return HistoryWindow(
        events_first_seq=events_first,
        events_first_time=events_time,
        commands_first_seq=commands_first,
        commands_first_time=commands_time,
        truncated=events_first > 1,
    )


async def read_kv_seed(nc: Client, key: ReconcileKey) -> tuple[KvSeedEntry, ...]:
    """The last KV write of every entry under ``key`` (delete markers included), with its revision."""
    prefix = f"$KV.{subjects.OBJECTS_BUCKET}."
    stream = f"KV_{subjects.OBJECTS_BUCKET}"
    seed: list[KvSeedEntry] = []
    async for stored in direct_batches(nc, stream, multi_last=prefix + subjects.entry_prefix(key)):
        _, entry_kind, name = stored.subject[len(prefix) :].rsplit(".", 2)
        deleted = stored.headers.get("KV-Operation") in ("DEL", "PURGE")
        value: dict[str, Any] | None = None
        if not deleted:
            try:
                value = _json.decode(stored.data)
            except msgspec.DecodeError:
                log.warning("replay: undecodable KV entry %s", stored.subject)
                continue
        seed.append(KvSeedEntry(entry_kind=entry_kind, name=decode_token(name), revision=stored.seq, value=value))
    return tuple(seed)


async def read_history(nc: Client, key: ReconcileKey, *, window: HistoryWindow | None = None) -> KeyHistory:
    """Everything the bus still holds for ``key``.

    Raises:
        RetryableError: the server did not answer.
    """
    window = window or await read_window(nc)
    decisions: list[RecordedDecision] = []
    skipped: list[int] = []
    async for stored in direct_batches(nc, subjects.COMMANDS_STREAM, subject_filter=subjects.command_subject(key)):
        try:
            decisions.append(RecordedDecision(seq=stored.seq, time=stored.time, batch=decode_batch(stored.data)))
        except (msgspec.DecodeError, msgspec.ValidationError):
            skipped.append(stored.seq)
    inputs: list[RecordedInput] = []
    async for stored in direct_batches(nc, subjects.EVENTS_STREAM, subject_filter=stored_events_filter(key)):
        try:
            inputs.append(RecordedInput(seq=stored.seq, time=stored.time, message=decode_input(stored.data)))
        except (msgspec.DecodeError, msgspec.ValidationError):
            skipped.append(stored.seq)
    if skipped:
        log.warning("replay: %d undecodable message(s) of %s skipped: %s", len(skipped), key, skipped[:10])
    seed = await read_kv_seed(nc, key) if window.truncated else ()
    return KeyHistory(
        key=key, inputs=tuple(inputs), decisions=tuple(decisions), window=window, kv_seed=seed, undecodable=len(skipped)
    )


async def active_keys(nc: Client, *, since: datetime | None) -> list[ReconcileKey]:
    """Keys with a decision recorded since ``since`` (every key with any decision when None), sorted."""
    found: dict[str, ReconcileKey] = {}
    async for stored in direct_batches(
        nc, subjects.COMMANDS_STREAM, subject_filter=subjects.COMMANDS_WILDCARD, start_time=since
    ):
        token = stored.subject
        if token in found or (since is not None and stored.time < since):
            continue  # (a start time past the last message answers with older ones: filter here too)
        try:
            found[token] = subjects.key_from_stored_subject(stored.subject)
        except ValueError:
            continue
    return sorted(found.values(), key=str)
