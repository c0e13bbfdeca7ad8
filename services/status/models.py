"""The history tables, as SQLAlchemy 2 declarative models (the schema itself changes only through
Alembic migrations in ``migrations/versions``; a test checks that both agree).

- ``commands``: the audit trail, one row per execution of a command: ``(batch_id, command_id)`` of the
  decision, ``(batch_seq, delivery)`` of the batch's stored message and its delivery (a batch redelivered
  after its applier died runs again: a second row; migration 0004).
- ``transitions``: every confirmed state-machine step, unique on
  ``(uid, field, from_value, to_value, resource_version)`` so redelivery never duplicates a row; each row
  records the RAYBUS_RESULTS sequence it came from (``raybus replay`` can start there).
- ``resources``: one row per custom-resource uid (an *incarnation*), kept after the CR is deleted; the
  latest incarnation of a namespace/name is the one with the latest ``first_seen``.
- ``rayjobs``: the RayJob view (migration 0002), one row per RayJob uid; ``rayservices``: the RayService
  view (migration 0003), one row per RayService uid. Further kind views are further tables keyed by
  ``resources.uid``, added by their own migration.

Times are stored in UTC (``UtcDateTime``: aware on PostgreSQL, naive-UTC text on SQLite, aware in Python
either way). Text columns have no length limit: the bus decides what a reason or message may hold.
Identifiers are ``BIGINT`` on PostgreSQL and ``INTEGER`` on SQLite (its auto-increment needs that type).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UtcDateTime(sa.TypeDecorator[datetime]):
    """A timestamp that always comes back timezone-aware in UTC, on every dialect."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        # SQLite stores text: keep it naive so every value sorts and compares as the same format.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UtcDateTime(), dict[str, Any]: Json, str: sa.Text(), int: sa.BigInteger()}


class Command(Base):
    """One command outcome (the audit trail)."""

    __tablename__ = "commands"
    __table_args__ = (
        sa.UniqueConstraint("batch_id", "command_id", "batch_seq", "delivery"),
        sa.Index(None, "kind", "namespace", "name", "id"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    batch_id: Mapped[str]
    command_id: Mapped[str]
    batch_seq: Mapped[int]
    delivery: Mapped[int]
    verb: Mapped[str]
    target: Mapped[str]
    kind: Mapped[str]
    namespace: Mapped[str]
    name: Mapped[str]
    outcome: Mapped[str]
    error: Mapped[str]
    status_code: Mapped[int]
    resource_version: Mapped[str]
    at: Mapped[datetime]
    trace_id: Mapped[str]
    stream_seq: Mapped[int]


class Transition(Base):
    """One confirmed state-machine step of a custom resource."""

    __tablename__ = "transitions"
    __table_args__ = (
        sa.UniqueConstraint("uid", "field", "from_value", "to_value", "resource_version"),
        sa.Index(None, "uid", "at", "id"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    kind: Mapped[str]
    uid: Mapped[str]
    namespace: Mapped[str]
    name: Mapped[str]
    field: Mapped[str]
    from_value: Mapped[str]
    to_value: Mapped[str]
    reason: Mapped[str]
    message: Mapped[str]
    resource_version: Mapped[str]
    at: Mapped[datetime]
    trace_id: Mapped[str]
    attributes: Mapped[dict[str, Any]]
    stream_seq: Mapped[int]
    batch_id: Mapped[str]
    command_id: Mapped[str]


class Resource(Base):
    """One incarnation (uid) of a custom resource, alive or deleted.

    ``fields`` maps each transition field to ``{"value", "at", "seq"}`` of its latest fact
    (:class:`services.status.transition_folds.FieldMark`); ``status`` repeats the value of the kind's status
    field so it can be filtered and indexed on every dialect.
    """

    __tablename__ = "resources"
    __table_args__ = (
        sa.Index(None, "kind", "namespace", "name", "first_seen"),
        sa.Index(None, "kind", "updated_at"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    uid: Mapped[str] = mapped_column(unique=True)
    kind: Mapped[str]
    namespace: Mapped[str]
    name: Mapped[str]
    status: Mapped[str]
    first_seen: Mapped[datetime]
    deleted_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]
    last_seq: Mapped[int]
    fields: Mapped[dict[str, Any]]


class RayJobView(Base):
    """The RayJob view (:func:`services.status.transition_folds.fold_rayjob`)."""

    __tablename__ = "rayjobs"
    __table_args__ = (sa.Index(None, "namespace", "name"),)

    uid: Mapped[str] = mapped_column(sa.ForeignKey("resources.uid"), primary_key=True)
    namespace: Mapped[str]
    name: Mapped[str]
    submission_mode: Mapped[str]
    job_id: Mapped[str]
    cluster_name: Mapped[str]
    deployment_status: Mapped[str]
    job_status: Mapped[str]
    attempts: Mapped[int] = mapped_column(sa.Integer())
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]


class RayServiceView(Base):
    """The RayService view (:func:`services.status.transition_folds.fold_rayservice`)."""

    __tablename__ = "rayservices"
    __table_args__ = (sa.Index(None, "namespace", "name"),)

    uid: Mapped[str] = mapped_column(sa.ForeignKey("resources.uid"), primary_key=True)
    namespace: Mapped[str]
    name: Mapped[str]
    service_status: Mapped[str]
    ready_reason: Mapped[str]
    active_cluster: Mapped[str]
    pending_cluster: Mapped[str]
    serving_cluster: Mapped[str]
    pending_traffic_percent: Mapped[int | None] = mapped_column(sa.Integer())
    rollback_status: Mapped[str]
    clusters_created: Mapped[int] = mapped_column(sa.Integer())
    clusters_deleted: Mapped[int] = mapped_column(sa.Integer())
    upgrades: Mapped[int] = mapped_column(sa.Integer())
    rollbacks: Mapped[int] = mapped_column(sa.Integer())
    ready_at: Mapped[datetime | None]
    upgrade_started_at: Mapped[datetime | None]
    upgraded_at: Mapped[datetime | None]
    last_upgrade_seconds: Mapped[float | None] = mapped_column(sa.Float())
    updated_at: Mapped[datetime]
