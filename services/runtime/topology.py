"""Streams, consumers and KV buckets, created idempotently at start-up from this one module.

Limits retention with a max age keeps history replayable (``raybus replay``); S2 compression keeps it
small. Creating is idempotent: an existing stream is updated to this configuration (JetStream refuses
changes it cannot make, e.g. a different partition count on a live stream; that surfaces as a
``TopologyError`` naming the stream rather than a silent mismatch).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    KeyValueConfig,
    StorageType,
    StoreCompression,
    StreamConfig,
    SubjectTransform,
)
from nats.js.errors import BadRequestError, NotFoundError, ServiceUnavailableError
from nats.js.kv import KeyValue

from schema import subjects
from services.runtime.backoff import Backoff, retry
from services.runtime.bus import connect
from services.runtime.errors import RetryableError, TopologyError
from services.runtime.settings import BusSettings, NatsSettings, PartitionSettings

log = logging.getLogger(__name__)

MIN_SERVER_VERSION = (2, 12, 0)
"""Message schedules (bus timers) need nats-server 2.12; 2.15 is what raybus is tested with."""

PROVISION_BACKOFF: Final = Backoff(base=0.5, cap=5.0)
"""Pauses between tries of :func:`provision` while the cluster does not answer."""

START_BACKOFF: Final = Backoff(base=0.2, cap=5.0)
"""Pauses between tries of a service's start-up step (:func:`when_answered`) while NATS does not answer."""

T = TypeVar("T")

DUPLICATE_WINDOW = 120.0
"""Seconds JetStream remembers Nats-Msg-Id: covers watcher HA races and publish retries."""


@dataclass(frozen=True)
class Buckets:
    """The KV buckets a service uses."""

    objects: KeyValue
    leases: KeyValue
    watcher: KeyValue
    applied: KeyValue


def parse_version(text: str) -> tuple[int, int, int]:
    """``"2.15.1"`` → ``(2, 15, 1)``; pre-release suffixes are ignored."""
    numbers: list[int] = []
    for part in text.split("-")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        numbers.append(int(digits or 0))
    while len(numbers) < 3:
        numbers.append(0)
    return numbers[0], numbers[1], numbers[2]


def require_server_version(found: str) -> None:
    """Refuse a server without the features raybus needs.

    Raises:
        TopologyError: the server is older than 2.12 (no message schedules).
    """
    if parse_version(found) < MIN_SERVER_VERSION:
        need = ".".join(map(str, MIN_SERVER_VERSION))
        raise TopologyError(
            f"nats-server {found} is too old: raybus needs >= {need} with JetStream "
            "(message schedules carry its timers)"
        )


def stream_configs(bus: BusSettings) -> list[StreamConfig]:
    """The four streams."""

    def stream(**fields: Any) -> StreamConfig:
        return StreamConfig(
            max_age=bus.max_age,
            storage=StorageType.FILE,
            compression=StoreCompression.S2,
            num_replicas=bus.replicas,
            duplicate_window=DUPLICATE_WINDOW,
            **fields,
        )

    return [
        stream(
            name=subjects.EVENTS_STREAM,
            description="watch events, observations and timer ticks, partitioned by reconcile key",
            subjects=[subjects.EVENTS_WILDCARD, subjects.TIMERS_WILDCARD],
            subject_transform=SubjectTransform(
                src=subjects.EVENTS_WILDCARD,
                dest=subjects.partition_transform_destination(bus.partitions),
            ),
            allow_msg_schedules=True,
            allow_direct=True,
        ),
        stream(
            name=subjects.COMMANDS_STREAM,
            description="command batches decided by reconcile, partitioned by reconcile key",
            subjects=[subjects.COMMANDS_WILDCARD],
            subject_transform=SubjectTransform(
                src=subjects.COMMANDS_WILDCARD,
                dest=subjects.command_transform_destination(bus.partitions),
            ),
            allow_direct=True,
        ),
        stream(
            name=subjects.RESULTS_STREAM,
            description="command outcomes and confirmed transitions",
            subjects=[subjects.RESULTS_WILDCARD],
            allow_direct=True,
        ),
        stream(
            name=subjects.DEADLETTER_STREAM,
            description="messages that could not be processed, with the reason",
            subjects=[subjects.DEADLETTER_WILDCARD],
        ),
    ]


def partition_consumer_config(partition: int, bus: BusSettings) -> ConsumerConfig:
    """Durable pull consumer of one events partition."""
    return ConsumerConfig(
        durable_name=subjects.partition_consumer(partition),
        filter_subject=subjects.partition_filter(partition),
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=bus.ack_wait,
        max_deliver=bus.max_deliver + 1,  # one more than the worker's own limit: it dead-letters first
        max_ack_pending=10_000,
    )


def work_consumer_config(durable: str, filter_subject: str, bus: BusSettings) -> ConsumerConfig:
    """Durable pull consumer of one applier partition, or shared by the status replicas."""
    return ConsumerConfig(
        durable_name=durable,
        filter_subject=filter_subject,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=bus.ack_wait,
        max_deliver=bus.max_deliver + 1,
        max_ack_pending=20_000,
    )


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    assert config.name is not None
    try:
        await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config)
        log.info("created stream %s", config.name)
        return
    try:
        await js.update_stream(config)
    except BadRequestError as exc:
        raise TopologyError(f"stream {config.name} exists with an incompatible configuration: {exc}") from exc


async def _ensure_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig) -> None:
    assert config.durable_name is not None
    try:
        await js.consumer_info(stream, config.durable_name)
    except NotFoundError:
        await js.add_consumer(stream, config)
        return
    try:
        await js.add_consumer(stream, config)  # same name: an update of the mutable fields
    except BadRequestError as exc:
        raise TopologyError(f"consumer {stream}/{config.durable_name} is incompatible: {exc}") from exc


async def _ensure_bucket(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    try:
        return await js.key_value(config.bucket)
    except Exception:  # nats-py raises BucketNotFoundError or NotFoundError depending on the path
        return await js.create_key_value(config)


async def ensure_topology(
    nc: Client, *, bus: BusSettings, partitions: PartitionSettings, with_consumers: bool = True
) -> Buckets:
    """Create or update every stream, consumer and bucket raybus uses; return the buckets.

    Raises:
        TopologyError: the server cannot host raybus or a stream conflicts.
    """
    require_server_version(str(nc.connected_server_version))
    js = nc.jetstream()
    for config in stream_configs(bus):
        await _ensure_stream(js, config)
    if with_consumers:
        for partition in range(bus.partitions):
            await _ensure_consumer(js, subjects.EVENTS_STREAM, partition_consumer_config(partition, bus))
            await _ensure_consumer(
                js,
                subjects.COMMANDS_STREAM,
                work_consumer_config(
                    subjects.applier_consumer(partition), subjects.command_partition_filter(partition), bus
                ),
            )
        await _ensure_consumer(
            js,
            subjects.RESULTS_STREAM,
            work_consumer_config(subjects.STATUS_CONSUMER, subjects.RESULTS_WILDCARD, bus),
        )
    buckets = await open_buckets(nc, bus=bus, partitions=partitions)
    await _ensure_bucket_ttl(js, subjects.LEASES_BUCKET, partitions.lease_ttl)
    return buckets


async def _ensure_bucket_ttl(js: JetStreamContext, bucket: str, ttl: float) -> None:
    """Give an existing bucket ``ttl`` (one created with another lease TTL keeps it otherwise: members
    would fence by one TTL while entries expire by another)."""
    info = await js.stream_info(f"KV_{bucket}")
    config = info.config
    if config.max_age == ttl:
        return
    config.max_age = ttl
    config.duplicate_window = min(config.duplicate_window or ttl, ttl)  # JetStream wants it within the max age
    await js.update_stream(config)
    log.info("bucket %s: entries now expire after %.1fs", bucket, ttl)


def _bucket_config(
    bus: BusSettings, bucket: str, description: str, *, ttl: float | None = None, direct: bool | None = True
) -> KeyValueConfig:
    """A bucket of raybus: one version per key, on file, replicated like the streams; ``direct`` gets on (None:
    the server's default)."""
    return KeyValueConfig(
        bucket=bucket,
        description=description,
        history=1,
        ttl=ttl,
        storage=StorageType.FILE,
        replicas=bus.replicas,
        direct=direct,
    )


def _leases_config(bus: BusSettings, partitions: PartitionSettings) -> KeyValueConfig:
    return _bucket_config(
        bus, subjects.LEASES_BUCKET, "partition leases and worker heartbeats", ttl=partitions.lease_ttl
    )


async def open_leases(nc: Client, *, bus: BusSettings, partitions: PartitionSettings) -> KeyValue:
    """Open (creating if needed) the leases bucket alone: what a reconciler uses of the buckets (its NATS
    user in deploy/ may not look at the others' streams)."""
    return await _ensure_bucket(nc.jetstream(), _leases_config(bus, partitions))


async def open_buckets(nc: Client, *, bus: BusSettings, partitions: PartitionSettings) -> Buckets:
    """Open (creating if needed) the KV buckets."""
    js = nc.jetstream()
    objects = await _ensure_bucket(
        js,
        _bucket_config(bus, subjects.OBJECTS_BUCKET, "latest version of every object, stored under its reconcile key"),
    )
    leases = await _ensure_bucket(js, _leases_config(bus, partitions))
    watcher = await _ensure_bucket(
        js, _bucket_config(bus, subjects.WATCHER_BUCKET, "informer resume points", direct=None)
    )
    applied = await _ensure_bucket(
        js,
        _bucket_config(
            bus,
            subjects.APPLIED_BUCKET,
            "the newest snapshot revision applied per key (replayed decisions are refused)",
            ttl=subjects.APPLIED_TTL,
        ),
    )
    return Buckets(objects=objects, leases=leases, watcher=watcher, applied=applied)


async def provision(
    nats_settings: NatsSettings,
    *,
    bus: BusSettings,
    partitions: PartitionSettings,
    timeout: float,
    on_retry: Callable[[str, float], None] | None = None,
) -> None:
    """Connect and :func:`ensure_topology`, trying again while the servers do not answer or JetStream is
    not ready (a cluster still electing its meta leader or placing a stream's replicas: a stream not found
    and then a timeout creating it), for at most ``timeout`` seconds overall. Each try starts over on a
    fresh connection; what an earlier try created is found and updated, so a retry is harmless.

    Args:
        on_retry: told (the failure in one line, the pause in seconds) before each pause.

    Raises:
        TopologyError: a refusal that no retry changes (server too old, conflicting stream), or no
            success within ``timeout``, with the last failure.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    failures = 0
    last = "no answer"
    while True:
        try:
            async with asyncio.timeout_at(deadline):
                nc = await connect(nats_settings, name="raybus-topology")
                try:
                    await ensure_topology(nc, bus=bus, partitions=partitions)
                finally:
                    await nc.close()
            return
        except (RetryableError, nats.errors.Error, TimeoutError) as exc:
            failure = str(exc).splitlines()[0] if str(exc) else ""
            if loop.time() >= deadline:  # a try cut short by the deadline says nothing new
                said = failure or last
                raise TopologyError(
                    f"NATS JetStream did not accept the topology within {timeout:.0f}s (last failure: {said})"
                ) from exc
            last = failure or type(exc).__name__
            failures += 1
            pause = min(PROVISION_BACKOFF.delay(failures), max(0.0, deadline - loop.time()))
            if on_retry is not None:
                on_retry(last, pause)
            await asyncio.sleep(pause)


_NOT_ANSWERING: Final = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.UnexpectedEOF,
    nats.errors.StaleConnectionError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.FlushTimeoutError,
    ServiceUnavailableError,
    TimeoutError,
)
"""Failures a nats-server restarting (or its JetStream recovering its streams) explains."""


async def when_answered(step: Callable[[], Awaitable[T]], service: str) -> T:
    """Run a service's start-up ``step`` on its connection (:func:`ensure_topology`, or opening what it uses)
    until NATS answers: a nats-server killed and restarted while the service starts delays the start
    instead of ending the process (the connection reconnects by itself). A refusal still raises
    (:class:`TopologyError`, a permission), and so does a connection closed for good."""
    return await retry(
        step,
        START_BACKOFF,
        transient=lambda exc: isinstance(exc, _NOT_ANSWERING),
        on_retry=lambda exc, _, delay: log.warning(
            "%s: NATS did not answer at start-up (%s); trying again in %.1fs", service, exc or type(exc).__name__, delay
        ),
    )
