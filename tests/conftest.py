"""Project-wide test configuration: server fixtures and hygiene guards (warnings are errors, no task
may outlive its test)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.fixtures.nats import _ensure_nats_server_binary, nats_server  # noqa: F401
from tests.fixtures.natscluster import nats_cluster  # noqa: F401
from tests.fixtures.pgserver import private_postgres  # noqa: F401
from tests.fixtures.postgres import db_url, pg_url  # noqa: F401
from tests.helpers import reap_tasks


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    """Fail any async test that leaves asyncio tasks running."""
    before = asyncio.all_tasks()
    yield
    leaked = await reap_tasks(before)
    if leaked:
        pytest.fail(f"test left {len(leaked)} asyncio task(s) running: {[t.get_coro() for t in leaked]}")
