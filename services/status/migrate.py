"""Alembic migrations of the status database, configured in code (there is no ``alembic.ini`` to keep in
sync: the script location is this package's sibling ``migrations/``).

``raybus status`` runs ``raybus migrate upgrade`` in a child at start (unless ``--no-migrate``; see
:mod:`services.status.migrating`); on PostgreSQL the migration takes an advisory lock, so replicas
starting together do not race. Operators who want Alembic's own
commands generate a config file and point ``alembic`` at it::

    raybus migrate config /tmp/raybus-alembic.ini       # or: python -m services.status.migrate config ...
    RAYBUS_DB_URL=postgresql+asyncpg://raybus@db/raybus alembic -c /tmp/raybus-alembic.ini current
    RAYBUS_DB_URL=... alembic -c /tmp/raybus-alembic.ini history
    RAYBUS_DB_URL=... alembic -c /tmp/raybus-alembic.ini upgrade head --sql   # SQL for a DBA to review

The file holds the script location only, unless ``--db-url`` is given: a password never has to be
written to disk (``migrations/env.py`` falls back to ``RAYBUS_DB_URL``). The same module also upgrades
directly: ``raybus migrate upgrade [--db-url URL]``.

New revisions: ``alembic -c <config> revision --autogenerate -m "..."`` compares the models
(``services.status.models``) with a database at head; the tests check both stay equal.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

import migrations
from services.runtime.errors import RaybusError, RetryableError
from services.runtime.settings import load_settings
from services.status.migrating import REASON_PREFIX, RETRY_LATER
from services.status.store import StatusStore, create_engine

SCRIPT_LOCATION = Path(migrations.__file__).resolve().parent


def alembic_config(db_url: str | None = None) -> Config:
    """An Alembic config for raybus's migrations, optionally bound to ``db_url``."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    if db_url:
        config.set_main_option("sqlalchemy.url", db_url.replace("%", "%%"))  # configparser interpolation
    return config


def head_revision() -> str:
    """The newest revision in ``migrations/versions``."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


async def upgrade(db_url: str, *, revision: str = "head") -> None:
    """Migrate the database at ``db_url`` to ``revision`` (idempotent).

    Raises:
        RetryableError: the database is unreachable.
        PermanentError: the URL is unusable.
    """
    engine = create_engine(db_url)
    try:
        await StatusStore(engine).ping()
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade_sync, alembic_config(), revision)
    finally:
        await engine.dispose()


def _upgrade_sync(connection: Connection, config: Config, revision: str) -> None:
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


async def current_revision(db_url: str) -> str | None:
    """The revision the database is at (None when never migrated)."""
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())
    finally:
        await engine.dispose()


def write_config(path: Path, *, db_url: str | None = None) -> Path:
    """Write an ``alembic.ini`` usable with ``alembic -c``; returns ``path``."""
    lines = ["[alembic]", f"script_location = {SCRIPT_LOCATION}"]
    if db_url:
        lines.append(f"sqlalchemy.url = {db_url.replace('%', '%%')}")
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """``raybus migrate {upgrade,config}`` (also ``python -m services.status.migrate``)."""
    parser = argparse.ArgumentParser(prog="raybus migrate", description="Migrate the status database (Alembic).")
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("upgrade", help="migrate the database to head")
    up.add_argument("--db-url", help="default: RAYBUS_DB_URL, else the built-in SQLite file")
    up.add_argument("--revision", default="head")
    cfg = sub.add_parser("config", help="write an alembic.ini for `alembic -c`")
    cfg.add_argument("path", type=Path)
    cfg.add_argument("--db-url", help="write this URL into the file (else env.py reads RAYBUS_DB_URL)")
    args = parser.parse_args(argv)
    if args.action == "config":
        print(write_config(args.path, db_url=args.db_url))
        return 0
    db_url = args.db_url or load_settings(os.environ).status.db_url
    try:
        asyncio.run(upgrade(db_url, revision=args.revision))
    except RaybusError as exc:
        print(f"{REASON_PREFIX}{exc}", file=sys.stderr)
        return RETRY_LATER if isinstance(exc, RetryableError) else 1
    print(f"database at {asyncio.run(current_revision(db_url))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
