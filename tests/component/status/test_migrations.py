"""Alembic migrations on SQLite and PostgreSQL: from empty to head, idempotent, equal to the models."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection

from services.runtime.errors import RetryableError
from services.status.migrate import alembic_config, current_revision, head_revision, upgrade, write_config
from services.status.migrating import upgrade_in_child
from services.status.models import Base
from services.status.store import create_engine


async def test_upgrade_from_empty_to_head_matches_the_models(db_url: str) -> None:
    assert await current_revision(db_url) is None
    await upgrade(db_url)
    await upgrade(db_url)  # a second start changes nothing
    assert await current_revision(db_url) == head_revision() == "0004"

    def diff(sync: Connection) -> Any:
        return compare_metadata(MigrationContext.configure(sync, opts={"compare_type": True}), Base.metadata)

    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            assert await conn.run_sync(diff) == []
    finally:
        await engine.dispose()


async def test_step_by_step_upgrade(db_url: str) -> None:
    await upgrade(db_url, revision="0001")
    assert await current_revision(db_url) == "0001"
    await upgrade(db_url)
    assert await current_revision(db_url) == "0004"


async def test_the_status_service_migrates_in_a_child(db_url: str) -> None:
    await upgrade_in_child(db_url)
    await upgrade_in_child(db_url)  # a second start changes nothing
    assert await current_revision(db_url) == head_revision()


@pytest.mark.parametrize(
    "bad_url",
    [
        pytest.param("postgresql+asyncpg://raybus:s3cret@127.0.0.1:1/raybus", id="postgresql-port-closed"),
        pytest.param("sqlite+aiosqlite:////proc/version/raybus.db", id="sqlite-path-impossible"),
    ],
)
async def test_a_child_that_cannot_reach_the_database_says_so_without_the_password(bad_url: str) -> None:
    with pytest.raises(RetryableError, match="unreachable") as raised:
        await upgrade_in_child(bad_url)
    assert "s3cret" not in str(raised.value)


def test_generated_config_drives_the_alembic_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path}/ops.db"
    ini = write_config(tmp_path / "alembic.ini")
    assert "sqlalchemy.url" not in ini.read_text()  # no URL (and so no password) on disk by default
    monkeypatch.setenv("RAYBUS_DB_URL", db_url)  # what env.py falls back to, as an operator would set it
    printed = io.StringIO()
    config = Config(str(ini), stdout=printed)
    command.upgrade(config, "head")
    command.current(config)
    assert printed.getvalue().strip() == "0004 (head)"
    command.upgrade(config, "0001:head", sql=True)  # offline: SQL for a DBA
    offline = capsys.readouterr().out
    assert "CREATE TABLE rayjobs" in offline and "CREATE TABLE rayservices" in offline
    assert alembic_config(db_url).get_main_option("sqlalchemy.url") == db_url
