"""The one place that spells subjects, stream names, consumer names and KV buckets; nothing else spells one.

Layout (docs/architecture.md#flow):

- ``RAYBUS_EVENTS``: watch events, observations and timer ticks, published on
  ``raybus.events.<kind>.<ns>.<name>``; a subject transform stores them as
  ``raybus.part.<p>.<kind>.<ns>.<name>`` where ``p`` is a hash partition of the key, so one consumer per
  partition gives per-key order. Timers are message schedules on ``raybus.timers.<kind>.<ns>.<name>``
  (a rollup subject: one pending timer per key) whose target is the key's events subject.
- ``RAYBUS_COMMANDS``: one command batch per decision on ``raybus.cmd.<kind>.<ns>.<name>``.
- ``RAYBUS_RESULTS``: command outcomes and confirmed transitions on ``raybus.results.<kind>.<ns>.<name>``.
- ``RAYBUS_DEADLETTER``: messages that could not be processed, on ``raybus.dlq.<stream>``.
- KV ``raybus-objects``: the projection, entries ``<key token>.<entry kind>.<entry name>``.
- KV ``raybus-leases``: partition leases ``p.<n>`` and worker heartbeats ``w.<id>`` (TTL).
- KV ``raybus-watcher``: informer resume points ``rv.<resource>``.
- ``raybus.replay``: request/reply (no stream): a reconciler replays a key's recorded decisions with the
  code it runs (``schema.replayview``), for the status service's console.
"""

from __future__ import annotations

from typing import Final

from schema.keys import ReconcileKey, encode_token

PREFIX: Final = "raybus"

EVENTS_STREAM: Final = "RAYBUS_EVENTS"
COMMANDS_STREAM: Final = "RAYBUS_COMMANDS"
RESULTS_STREAM: Final = "RAYBUS_RESULTS"
DEADLETTER_STREAM: Final = "RAYBUS_DEADLETTER"

OBJECTS_BUCKET: Final = "raybus-objects"
LEASES_BUCKET: Final = "raybus-leases"
WATCHER_BUCKET: Final = "raybus-watcher"

APPLIER_CONSUMER: Final = "raybus-applier"
STATUS_CONSUMER: Final = "raybus-status"

REPLAY_SUBJECT: Final = f"{PREFIX}.replay"
REPLAY_QUEUE: Final = "raybus-replay"
"""Queue group of the reconcilers answering on ``REPLAY_SUBJECT`` (one of them answers each request)."""

DEFAULT_PARTITIONS: Final = 16

EVENTS_WILDCARD: Final = f"{PREFIX}.events.*.*.*"
TIMERS_WILDCARD: Final = f"{PREFIX}.timers.*.*.*"
COMMANDS_WILDCARD: Final = f"{PREFIX}.cmd.*.*.*"
RESULTS_WILDCARD: Final = f"{PREFIX}.results.*.*.*"
DEADLETTER_WILDCARD: Final = f"{PREFIX}.dlq.>"


def events_subject(key: ReconcileKey) -> str:
    """Where the watcher, the prober and timers publish an input for ``key``."""
    return f"{PREFIX}.events.{key.token()}"


def timer_subject(key: ReconcileKey) -> str:
    """The rollup schedule subject of ``key``'s single pending timer."""
    return f"{PREFIX}.timers.{key.token()}"


def command_subject(key: ReconcileKey) -> str:
    """Where the reconciler publishes ``key``'s command batches."""
    return f"{PREFIX}.cmd.{key.token()}"


def result_subject(key: ReconcileKey) -> str:
    """Where the applier publishes command outcomes for ``key``."""
    return f"{PREFIX}.results.{key.token()}"


def deadletter_subject(stream: str) -> str:
    """Where a message from ``stream`` that could not be processed is parked."""
    return f"{PREFIX}.dlq.{stream}"


def partition_transform_destination(partitions: int) -> str:
    """Subject-transform destination that prefixes events with their key's partition."""
    tokens = ".".join(f"{{{{wildcard({n})}}}}" for n in (1, 2, 3))
    return f"{PREFIX}.part.{{{{partition({partitions},1,2,3)}}}}.{tokens}"


def partition_filter(partition: int) -> str:
    """Filter subject of one partition's consumer."""
    return f"{PREFIX}.part.{partition}.>"


def stored_events_filter(key: ReconcileKey) -> str:
    """Filter of ``key``'s inputs as the events stream stores them (in whichever partition)."""
    return f"{PREFIX}.part.*.{key.token()}"


def partition_consumer(partition: int) -> str:
    """Durable consumer name of one partition."""
    return f"raybus-part-{partition}"


def key_from_stored_subject(subject: str) -> ReconcileKey:
    """The key of a message as stored in a stream (``raybus.<tag>.[<p>.]<kind>.<ns>.<name>``).

    Raises:
        ValueError: the subject does not end in a key.
    """
    return ReconcileKey.from_token(".".join(subject.split(".")[-3:]))


def kv_subject(bucket: str, key: str = "") -> str:
    """The subject JetStream stores KV ``key`` of ``bucket`` on (``$KV.<bucket>.<key>``; the bucket's
    prefix when ``key`` is empty): what a write publishes to and what a direct get filters on."""
    return f"$KV.{bucket}.{key}"


def kv_stream(bucket: str) -> str:
    """The stream behind KV ``bucket``."""
    return f"KV_{bucket}"


def direct_get_subject(stream: str) -> str:
    """The JetStream API subject of a direct get on ``stream``."""
    return f"$JS.API.DIRECT.GET.{stream}"


def entry_key(key: ReconcileKey, entry_kind: str, entry_name: str) -> str:
    """KV key of one projected object (or observation) under ``key``'s prefix."""
    return f"{key.token()}.{entry_kind}.{encode_token(entry_name)}"


def entry_prefix(key: ReconcileKey) -> str:
    """KV filter matching every entry of ``key``'s snapshot."""
    return f"{key.token()}.>"


def lease_key(partition: int) -> str:
    """KV key of a partition lease."""
    return f"p.{partition}"


def heartbeat_key(worker_id: str) -> str:
    """KV key of a worker's membership heartbeat."""
    return f"w.{encode_token(worker_id)}"


def resume_key(resource: str) -> str:
    """KV key of an informer's last published resourceVersion."""
    return f"rv.{encode_token(resource)}"
