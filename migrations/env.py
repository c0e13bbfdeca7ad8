"""Alembic environment of the status database (SQLite or PostgreSQL, async drivers).

Three ways in:

- programmatic (``services.status.migrate.upgrade``): the caller opens an async connection, calls
  Alembic inside ``run_sync`` and hands the sync connection over in ``config.attributes["connection"]``;
- the ``alembic`` command with a generated config (``python -m services.status.migrate config
  alembic.ini``): the URL comes from the config's ``sqlalchemy.url`` or else from ``RAYBUS_DB_URL``
  (read through ``load_settings``, the one place raybus parses its environment), and this module runs
  its own event loop;
- offline (``alembic upgrade head --sql``): SQL is printed for a DBA instead of executed.

On PostgreSQL the migration transaction first takes an advisory lock, so status replicas starting
together migrate one after the other instead of racing on ``CREATE TABLE``. SQLite alters tables in
"batch" mode (copy and move), which is the only way it can change constraints.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import pool, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from services.runtime.settings import load_settings
from services.status.models import Base

MIGRATION_LOCK_KEY = 0x7261796275_5F00  # "raybus_" as a stable 64-bit advisory-lock key

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or load_settings(os.environ).status.db_url


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=target_metadata,
        compare_type=True,
        **kwargs,  # type: ignore[arg-type]
    )


def run_migrations_offline() -> None:
    url = _url()
    sqlite = url.startswith("sqlite")
    _configure(url=url, literal_binds=True, dialect_opts={"paramstyle": "named"}, render_as_batch=sqlite)
    with context.begin_transaction():
        context.run_migrations()


def do_run_migrations(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    _configure(connection=connection, render_as_batch=sqlite)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        context.run_migrations()


async def run_async_migrations() -> None:
    engine = create_async_engine(_url(), poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(do_run_migrations)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        do_run_migrations(connection)
    else:
        asyncio.run(run_async_migrations())


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
