"""The one place that spells subjects, stream names, consumer names and KV buckets; nothing else spells one.

Layout (docs/architecture.md#flow):

- ``RAYBUS_EVENTS``: watch events, observations and timer ticks, published on
  ``raybus.events.<kind>.<ns>.<name>``; a subject transform stores them as
  ``raybus.part.<p>.<kind>.<ns>.<name>`` where ``p`` is a hash partition of the key, so one consumer per
  partition gives per-key order. Timers are message schedules on ``raybus.timers.<kind>.<ns>.<name>``
  (a rollup subject: one pending timer per key) whose target is the key's events subject.
- ``RAYBUS_COMMANDS``: one command batch per decision on ``raybus.cmd.<kind>.<ns>.<name>``, stored as
  ``raybus.cmdpart.<p>.<kind>.<ns>.<name>`` by the same partition transform (a key's commands land in the
  partition number of its events), so the applier too has one consumer per partition.
- ``RAYBUS_RESULTS``: command outcomes and confirmed transitions on ``raybus.results.<kind>.<ns>.<name>``.
- ``RAYBUS_DEADLETTER``: messages that could not be processed, on ``raybus.dlq.<stream>``.
- KV ``raybus-objects``: the projection, entries ``<key token>.<entry kind>.<entry name>``.
- KV ``raybus-leases``: per group of replicas sharing the partitions (``reconcile``, ``apply``,
  ``probe``), partition leases ``<group>.p.<n>`` and member heartbeats ``<group>.w.<id>`` (TTL).
- KV ``raybus-watcher``: informer resume points ``rv.<resource>``.
- KV ``raybus-applied``: per key (``<key token>``), the newest snapshot revision of a decision the
  appliers applied (``services.edge.apply.freshness``); entries expire after ``APPLIED_TTL``.
- ``raybus.replay``: request/reply (no stream): a reconciler replays a key's recorded decisions with the
  code it runs (``schema.replayview``), for the status service's console.
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple

from schema.keys import KeyKind, ReconcileKey, decode_token, encode_token

PREFIX: Final = "raybus"

EVENTS_STREAM: Final = "RAYBUS_EVENTS"
COMMANDS_STREAM: Final = "RAYBUS_COMMANDS"
RESULTS_STREAM: Final = "RAYBUS_RESULTS"
DEADLETTER_STREAM: Final = "RAYBUS_DEADLETTER"

OBJECTS_BUCKET: Final = "raybus-objects"
LEASES_BUCKET: Final = "raybus-leases"
WATCHER_BUCKET: Final = "raybus-watcher"
APPLIED_BUCKET: Final = "raybus-applied"
APPLIED_TTL: Final = 7 * 24 * 3600.0
"""Seconds a key's applied-decision revision is kept after its last applied decision."""

STATUS_CONSUMER: Final = "raybus-status"

REPLAY_SUBJECT: Final = f"{PREFIX}.replay"
REPLAY_QUEUE: Final = "raybus-replay"
"""Queue group of the reconcilers answering on ``REPLAY_SUBJECT`` (one of them answers each request)."""

DEFAULT_PARTITIONS: Final = 16

EVENTS_WILDCARD: Final = f"{PREFIX}.events.*.*.*"
TIMERS_PREFIX: Final = f"{PREFIX}.timers."
"""Where the keys' schedules live (``timer_subject``): no input is stored under it."""
TIMERS_WILDCARD: Final = f"{TIMERS_PREFIX}*.*.*"
COMMANDS_WILDCARD: Final = f"{PREFIX}.cmd.*.*.*"
STORED_COMMANDS_WILDCARD: Final = f"{PREFIX}.cmdpart.*.*.*.*"
"""Every command batch as the commands stream stores it (in whichever partition)."""
RESULTS_WILDCARD: Final = f"{PREFIX}.results.*.*.*"
DEADLETTER_WILDCARD: Final = f"{PREFIX}.dlq.>"


def events_subject(key: ReconcileKey) -> str:
    """Where the watcher, the prober and timers publish an input for ``key``."""
    return f"{PREFIX}.events.{key.token()}"


def timer_subject(key: ReconcileKey) -> str:
    """The rollup schedule subject of ``key``'s single pending timer."""
    return f"{TIMERS_PREFIX}{key.token()}"


def command_subject(key: ReconcileKey) -> str:
    """Where the reconciler publishes ``key``'s command batches."""
    return f"{PREFIX}.cmd.{key.token()}"


def result_subject(key: ReconcileKey) -> str:
    """Where the applier publishes command outcomes for ``key``."""
    return f"{PREFIX}.results.{key.token()}"


def deadletter_subject(stream: str) -> str:
    """Where a message from ``stream`` that could not be processed is parked."""
    return f"{PREFIX}.dlq.{stream}"


_EVENTS_PART: Final = "part"
_COMMANDS_PART: Final = "cmdpart"


def _partition_transform(tag: str, partitions: int) -> str:
    tokens = ".".join(f"{{{{wildcard({n})}}}}" for n in (1, 2, 3))
    return f"{PREFIX}.{tag}.{{{{partition({partitions},1,2,3)}}}}.{tokens}"


def partition_transform_destination(partitions: int) -> str:
    """Subject-transform destination that prefixes events with their key's partition."""
    return _partition_transform(_EVENTS_PART, partitions)


def command_transform_destination(partitions: int) -> str:
    """Subject-transform destination that prefixes command batches with their key's partition (the same
    hash over the same three key tokens as events: a key's commands and events share a partition number)."""
    return _partition_transform(_COMMANDS_PART, partitions)


def partition_of(key: ReconcileKey, partitions: int) -> int:
    """The partition the streams' transform puts ``key`` in: nats-server's ``partition(n,1,2,3)``, the
    32-bit FNV-1a hash of the key's three subject tokens written one after the other, modulo ``n``."""
    digest = 0x811C9DC5
    for byte in "".join(key.token().split(".")).encode():
        digest = ((digest ^ byte) * 0x01000193) & 0xFFFFFFFF
    return digest % partitions


def partition_filter(partition: int) -> str:
    """Filter subject of one partition's consumer."""
    return f"{PREFIX}.{_EVENTS_PART}.{partition}.>"


def stored_events_filter(key: ReconcileKey) -> str:
    """Filter of ``key``'s inputs as the events stream stores them (in whichever partition)."""
    return f"{PREFIX}.{_EVENTS_PART}.*.{key.token()}"


def partition_consumer(partition: int) -> str:
    """Durable consumer name of one partition."""
    return f"raybus-part-{partition}"


def command_partition_filter(partition: int) -> str:
    """Filter subject of one partition's applier consumer."""
    return f"{PREFIX}.{_COMMANDS_PART}.{partition}.>"


def stored_commands_filter(key: ReconcileKey) -> str:
    """Filter of ``key``'s command batches as the commands stream stores them (in whichever partition)."""
    return f"{PREFIX}.{_COMMANDS_PART}.*.{key.token()}"


def applier_consumer(partition: int) -> str:
    """Durable consumer name of one partition of command batches (the applier's)."""
    return f"raybus-applier-{partition}"


def partition_of_stored(subject: str) -> int:
    """The partition number of a message as a partitioned stream stores it (``raybus.<tag>.<p>.…``).

    Raises:
        ValueError: the subject carries no partition number.
    """
    return int(subject.split(".")[2])


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


def pull_request_subject(stream: str, consumer: str) -> str:
    """The JetStream API subject a pull request for ``consumer`` of ``stream`` is published to."""
    return f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"


def direct_get_subject(stream: str) -> str:
    """The JetStream API subject of a direct get on ``stream``."""
    return f"$JS.API.DIRECT.GET.{stream}"


def entry_key(key: ReconcileKey, entry_kind: str, entry_name: str) -> str:
    """KV key of one projected object (or observation) under ``key``'s prefix."""
    return f"{key.token()}.{entry_kind}.{encode_token(entry_name)}"


class EntryKey(NamedTuple):
    """A KV entry key of ``raybus-objects``, parsed (:func:`parse_entry_key`)."""

    key: ReconcileKey
    entry_kind: str
    name: str


def entry_kind_and_name(kv_key: str) -> tuple[str, str]:
    """The entry kind and the object's name of an entry key read under a key's prefix (:func:`entry_prefix`)."""
    _, entry_kind, name = kv_key.rsplit(".", 2)
    return entry_kind, decode_token(name)


def parse_entry_key(kv_key: str) -> EntryKey:
    """The inverse of :func:`entry_key`.

    Raises:
        ValueError: ``kv_key`` is not an entry key.
    """
    parts = kv_key.split(".")
    if len(parts) != 5:
        raise ValueError(f"not an entry key: {kv_key!r}")
    return EntryKey(ReconcileKey.from_token(".".join(parts[:3])), parts[3], decode_token(parts[4]))


def entry_prefix(key: ReconcileKey) -> str:
    """KV filter matching every entry of ``key``'s snapshot."""
    return f"{key.token()}.>"


def entries_of_kind(kind: KeyKind) -> str:
    """KV filter matching every entry of every key of one kind."""
    return f"{kind}.>"


LeaseGroup = Literal["reconcile", "apply", "probe"]
"""Replicas that share the partitions among themselves: reconcilers, appliers, probers."""


def lease_key(group: LeaseGroup, partition: int) -> str:
    """KV key of a partition lease of one group."""
    return f"{group}.p.{partition}"


def heartbeat_key(group: LeaseGroup, member: str) -> str:
    """KV key of a member's heartbeat in one group."""
    return f"{group}.w.{encode_token(member)}"


def heartbeats_filter(group: LeaseGroup) -> str:
    """KV filter matching every heartbeat of one group."""
    return f"{group}.w.*"


def leases_filter(group: LeaseGroup) -> str:
    """KV filter matching every partition lease of one group."""
    return f"{group}.p.*"


def applied_key(key: ReconcileKey) -> str:
    """KV key of the newest snapshot revision applied for ``key``."""
    return key.token()


def resume_key(resource: str) -> str:
    """KV key of an informer's last published resourceVersion."""
    return f"rv.{encode_token(resource)}"
