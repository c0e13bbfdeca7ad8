"""Fixtures of the status component tests: a migrated store, a NATS connection with the topology, a
runner that starts and stops ``run_status`` like the process would, and the history API over a store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence

import aiohttp
import pytest
import sqlalchemy as sa
from nats.aio.client import Client
from nats.js import JetStreamContext

from schema import codec, subjects
from schema.messages import CommandResult
from services.runtime.bus import connect
from services.runtime.health import HealthServer
from services.runtime.settings import BusSettings, NatsSettings, RaybusSettings, StatusSettings
from services.runtime.topology import ensure_topology
from services.status.api import ApiServer, StatusApi
from services.status.migrate import upgrade
from services.status.service import run_status
from services.status.store import ResultRecord, StatusStore, create_engine
from tests.fixtures.nats import NatsServer, free_port
from tests.helpers import eventually

ACK_WAIT = 1.0
"""Seconds before an unacked result is redelivered: short, so crash tests see redelivery quickly."""


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[StatusStore]:
    """A store on a freshly migrated database (SQLite and PostgreSQL)."""
    await upgrade(db_url)
    store = StatusStore(create_engine(db_url))
    try:
        yield store
    finally:
        await store.close()


def records(results: Sequence[CommandResult], *, trace_id: str | None = None) -> list[ResultRecord]:
    """``results`` as consumed from the stream: sequences 1, 2, ...; trace ids ``trace_id`` or one per
    sequence."""
    return [
        ResultRecord(result=one, stream_seq=seq, trace_id=trace_id or f"{seq:032x}")
        for seq, one in enumerate(results, start=1)
    ]


@contextlib.asynccontextmanager
async def history_api(
    store: StatusStore, results: Sequence[CommandResult], *, trace_id: str | None = None
) -> AsyncIterator[str]:
    """The history API's URL over ``store`` holding ``results`` (as :func:`records` numbers them)."""
    await store.persist(records(results, trace_id=trace_id))
    server = ApiServer(StatusApi(store), host="127.0.0.1", port=0)
    await server.start()
    try:
        yield server.url
    finally:
        await server.stop()


@pytest.fixture
def settings(nats_server: NatsServer, db_url: str) -> RaybusSettings:
    """Settings of one status service on this test's NATS server and database."""
    return RaybusSettings(
        nats=NatsSettings(url=nats_server.url),
        bus=BusSettings(partitions=1, ack_wait=ACK_WAIT),
        status=StatusSettings(db_url=db_url, http_port=free_port()),
    )


@pytest.fixture
async def nc(settings: RaybusSettings) -> AsyncIterator[Client]:
    """A client connection, with streams and consumers in place."""
    client = await connect(settings.nats, name="test")
    try:
        await ensure_topology(client, bus=settings.bus, partitions=settings.partitions)
        yield client
    finally:
        await client.close()


async def publish_results(
    js: JetStreamContext, results: Iterable[CommandResult], *, headers: dict[str, str] | None = None
) -> None:
    """Publish each result on its key's results subject."""
    for one in results:
        await js.publish(subjects.result_subject(one.key), codec.encode(one), headers=headers)


class StatusRunner:
    """Runs ``run_status`` as a task with a health server, the way ``run_service`` would."""

    def __init__(self, settings: RaybusSettings) -> None:
        self.settings = settings
        self.health = HealthServer(host="127.0.0.1", port=0)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._health_started = False

    @property
    def url(self) -> str:
        """The history API."""
        return f"http://{self.settings.status.http_host}:{self.settings.status.http_port}"

    async def start(self) -> StatusRunner:
        """Start the service and wait until ``/readyz`` says ready."""
        if not self._health_started:
            await self.health.start()
            self._health_started = True
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(run_status(self.settings, self._stop, self.health))
        await eventually(self._ready, timeout=20, message="status service ready")
        return self

    async def _ready(self) -> bool:
        assert self._task is not None
        if self._task.done():
            self._task.result()  # surface a crash now rather than at the timeout
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.health.port}/readyz") as ready,
            session.get(f"{self.url}/openapi.json") as api,
        ):
            return ready.status == 200 and api.status in (200, 401)  # 401: callers are reviewed

    async def stop(self) -> None:
        """Graceful: finish the batch in flight, ack, close."""
        if self._task is not None:
            self._stop.set()
            await self._task
            self._task = None

    async def kill(self) -> None:
        """Abrupt: cancel the task wherever it is (a crash, as far as the bus can tell)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def close(self) -> None:
        await self.kill()
        await self.health.stop()


@pytest.fixture
async def runner(settings: RaybusSettings) -> AsyncIterator[StatusRunner]:
    """A status service runner (not started); killed at the end of the test."""
    one = StatusRunner(settings)
    try:
        yield one
    finally:
        await one.close()


async def count(store: StatusStore, table: str) -> int:
    """Rows in ``table``."""
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.text(f"SELECT count(*) FROM {table}"))).scalar_one())
