"""Reading a key's recorded history from JetStream with batched direct gets (no consumer at all).

Role: the replayer's only adapter to NATS. Per key it reads, in this order, the decisions
(``RAYBUS_COMMANDS``, subject ``raybus.cmd.<key>``), then the inputs (``RAYBUS_EVENTS``, stored subjects
``raybus.part.*.<key>``), so every KV write a decision read already has its event in what was read (the
watcher publishes an event right after its KV write). When the events stream has dropped old messages,
it also reads the KV seed: the last write of every entry under the key's prefix, delete markers
included, with its revision (``services.runtime.kvread``, paged past the server's 1,024 keys per answer).

Reads are batched direct gets (``services.runtime.directget``): a few requests whatever the history
length, and no consumer (never a durable: reading history must not change the bus).

A decision published in parts (``schema.parts``) is joined back into one recorded decision, at the
sequence of its first part.

Not here: decoding errors are not fatal (an undecodable message is counted and skipped); replaying.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Final

import msgspec
from nats.aio.client import Client

from schema import subjects
from schema.codec import decode_batch, decode_input
from schema.keys import ReconcileKey, decode_token
from schema.parts import PartAssembler
from services.replay.history import HistoryWindow, KeyHistory, KvSeedEntry, RecordedDecision, RecordedInput
from services.runtime.directget import StoredMessage, direct_batches
from services.runtime.kvread import read_entries

log = logging.getLogger(__name__)

_json: Final[msgspec.json.Decoder[dict[str, Any]]] = msgspec.json.Decoder(dict[str, Any])


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
    read = await read_entries(nc, subjects.OBJECTS_BUCKET, subjects.entry_prefix(key))
    seed: list[KvSeedEntry] = []
    for entry_key, entry in sorted(read.entries.items(), key=lambda item: item[1].revision):
        _, entry_kind, name = entry_key.rsplit(".", 2)
        value: dict[str, Any] | None = None
        if entry.value is not None:
            try:
                value = _json.decode(entry.value)
            except msgspec.DecodeError:
                log.warning("replay: undecodable KV entry %s", entry_key)
                continue
        seed.append(KvSeedEntry(entry_kind=entry_kind, name=decode_token(name), revision=entry.revision, value=value))
    return tuple(seed)


async def read_history(nc: Client, key: ReconcileKey, *, window: HistoryWindow | None = None) -> KeyHistory:
    """Everything the bus still holds for ``key``.

    Raises:
        RetryableError: the server did not answer.
    """
    window = window or await read_window(nc)
    decisions: list[RecordedDecision] = []
    skipped: list[int] = []
    parts = PartAssembler()
    first_part: dict[str, StoredMessage] = {}
    async for stored in direct_batches(
        nc, subjects.COMMANDS_STREAM, subject_filter=subjects.stored_commands_filter(key)
    ):
        try:
            batch = decode_batch(stored.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            skipped.append(stored.seq)
            continue
        if batch.report:
            continue  # a failure shown on the custom resource, not a decision
        if batch.part == 0:
            first_part[batch.id] = stored
        whole = parts.add(batch)
        if whole is not None:
            # A decision split in parts is recorded where its first part is stored.
            at = first_part.pop(batch.id, stored)
            decisions.append(RecordedDecision(seq=at.seq, time=at.time, batch=whole))
    incomplete = parts.finish()
    if incomplete:
        log.warning("replay: %d decision(s) of %s lack parts, left out: %s", len(incomplete), key, incomplete[:10])
    inputs: list[RecordedInput] = []
    async for stored in direct_batches(nc, subjects.EVENTS_STREAM, subject_filter=subjects.stored_events_filter(key)):
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
        nc, subjects.COMMANDS_STREAM, subject_filter=subjects.STORED_COMMANDS_WILDCARD, start_time=since
    ):
        token = stored.subject
        if token in found or (since is not None and stored.time < since):
            continue  # (a start time past the last message answers with older ones: filter here too)
        try:
            found[token] = subjects.key_from_stored_subject(stored.subject)
        except ValueError:
            continue
    return sorted(found.values(), key=str)
