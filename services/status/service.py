"""The status service process: database, migrations, NATS, the HTTP API and the results consumer.

Start-up order fails fast and clearly: the database is checked first (an unreachable one raises
``RetryableError`` naming the URL without its password, within the connect timeout, instead of hanging),
then migrated (in a child process: Alembic stays out of this one), then NATS is connected and the
topology ensured; only then does the API listen and the consumer start. Readiness (``/readyz`` on the
runtime's health server) means "connected to NATS and the database answered its last probe".

Shutdown (``stop`` set): the consumer finishes and acks the batch in flight, then the API stops, the NATS
connection is flushed and closed (so the last acks leave), and the engine is disposed. Nothing
unfinished is acked. A crash of the consumer propagates, so the process exits and is restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from services.runtime.bus import connect
from services.runtime.health import HealthServer
from services.runtime.settings import RaybusSettings
from services.runtime.topology import ensure_topology, when_answered
from services.status.access import AccessReviewer, access_guard
from services.status.api import ApiServer, StatusApi
from services.status.console import Console
from services.status.consumer import ResultConsumer
from services.status.metrics import ResourceMetrics
from services.status.migrating import upgrade_in_child
from services.status.store import StatusStore, create_engine, redact_db_url

log = logging.getLogger(__name__)

DB_PROBE_INTERVAL = 5.0
"""Seconds between readiness probes of the database."""


class DatabaseProbe:
    """Pings the database periodically; :meth:`reason` is the readiness check."""

    def __init__(self, store: StatusStore, *, interval: float = DB_PROBE_INTERVAL) -> None:
        self._store = store
        self._interval = interval
        self._failure: str | None = None

    def reason(self) -> str | None:
        """None when the last probe succeeded, else why it failed."""
        return self._failure

    async def run(self, stop: asyncio.Event) -> None:
        """Probe every ``interval`` seconds until ``stop`` is set."""
        while not stop.is_set():
            try:
                await self._store.ping(timeout=self._interval)
            except Exception as exc:  # any failure means "not ready"; never crash the service for it
                self._failure = "database unreachable"
                log.warning("database probe failed: %s", exc)
            else:
                self._failure = None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._interval)


async def run_status(settings: RaybusSettings, stop: asyncio.Event, health: HealthServer) -> None:
    """Run the status service until ``stop`` is set, then drain (see the module docstring).

    Raises:
        RetryableError: the database or NATS is unreachable at start.
        PermanentError: the database URL is unusable.
        TopologyError: the NATS server cannot host raybus.
    """
    status = settings.status
    store = StatusStore(create_engine(status.db_url))
    try:
        await store.ping()
        if status.migrate:
            await upgrade_in_child(status.db_url)
        log.info("status database %s ready", redact_db_url(status.db_url))
        nc = await connect(settings.nats, name="raybus-status")
        try:
            if settings.nats.ensure_topology:
                await when_answered(
                    lambda: ensure_topology(nc, bus=settings.bus, partitions=settings.partitions), "status"
                )
            probe = DatabaseProbe(store)
            metrics = ResourceMetrics()
            consumer = ResultConsumer(nc, store, metrics=metrics)
            # First, so the service is not ready until it consumes (the other checks pass much earlier).
            health.add_readiness("results", consumer.readiness)
            health.add_readiness("nats", lambda: None if nc.is_connected else "not connected to NATS")
            health.add_readiness("database", probe.reason)
            console = Console(nc, partitions=settings.bus.partitions, trace_url_template=status.trace_url_template)
            reviewer = AccessReviewer(status.auth) if status.auth.enabled else None
            guard = access_guard(reviewer) if reviewer is not None else None
            api = StatusApi(store, extra_routes=console.routes(), pages=console.add_pages, guard=guard)
            server = ApiServer(api, host=status.http_host, port=status.http_port)
            await server.start()
            try:
                log.info(
                    "status API on %s (%s)", server.url, "bearer tokens reviewed" if reviewer else "no authentication"
                )
                await metrics.load(store)
                probe_task = asyncio.create_task(probe.run(stop), name="status-db-probe")
                try:
                    await consumer.run(stop)
                finally:
                    metrics.close()
                    probe_task.cancel()
                    await asyncio.wait([probe_task])  # unlike awaiting it, never swallows our own cancellation
            finally:
                # Also when loading the metrics failed or the service was stopped meanwhile: no listener outlives it.
                await server.stop()
                if reviewer is not None:
                    await reviewer.close()
        finally:
            await nc.close()
    finally:
        await store.close()
