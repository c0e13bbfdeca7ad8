"""The RayService view: status, active/pending/serving clusters, traffic, upgrades and rollbacks per
RayService uid.

Additive: a new table keyed by ``resources.uid``, filled by the consumer (``projection.fold_rayservice``
over a RayService's transitions, recomputed in the transaction that persists them). RayService history
may already be recorded when this revision runs, so it backfills the table with the same fold (online
only: ``--sql`` output creates the table and leaves the backfill to the next run of the service, which
refreshes a RayService's row with its next transition).

Revision ID: 0003
Revises: 0002
Create Date: 2026-01-01
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import msgspec
import sqlalchemy as sa
from alembic import context, op

from services.status.models import UtcDateTime
from services.status.transition_folds import Fact, fold_rayservice

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)
JSON = sa.JSON()


def _text(name: str) -> sa.Column[str]:
    return sa.Column(name, sa.Text(), nullable=False)


def _count(name: str) -> sa.Column[int]:
    return sa.Column(name, sa.Integer(), nullable=False)


def upgrade() -> None:
    op.create_table(
        "rayservices",
        sa.Column("uid", sa.Text(), nullable=False),
        _text("namespace"),
        _text("name"),
        _text("service_status"),
        _text("ready_reason"),
        _text("active_cluster"),
        _text("pending_cluster"),
        _text("serving_cluster"),
        sa.Column("pending_traffic_percent", sa.Integer(), nullable=True),
        _text("rollback_status"),
        _count("clusters_created"),
        _count("clusters_deleted"),
        _count("upgrades"),
        _count("rollbacks"),
        sa.Column("ready_at", TS, nullable=True),
        sa.Column("upgrade_started_at", TS, nullable=True),
        sa.Column("upgraded_at", TS, nullable=True),
        sa.Column("last_upgrade_seconds", sa.Float(), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("uid", name="pk_rayservices"),
        sa.ForeignKeyConstraint(["uid"], ["resources.uid"], name="fk_rayservices_uid_resources"),
    )
    op.create_index("ix_rayservices_namespace_name", "rayservices", ["namespace", "name"])
    if not context.is_offline_mode():
        _backfill()


def _backfill() -> None:
    """Fold the RayService transitions already recorded into the new table."""
    transitions = sa.table(
        "transitions",
        sa.column("kind", sa.Text()),
        sa.column("uid", sa.Text()),
        sa.column("namespace", sa.Text()),
        sa.column("name", sa.Text()),
        sa.column("field", sa.Text()),
        sa.column("from_value", sa.Text()),
        sa.column("to_value", sa.Text()),
        sa.column("reason", sa.Text()),
        sa.column("at", UtcDateTime()),
        sa.column("stream_seq", sa.BigInteger()),
        sa.column("attributes", JSON),
    )
    rows = op.get_bind().execute(sa.select(transitions).where(transitions.c.kind == "RayService"))
    facts: dict[str, list[Fact]] = defaultdict(list)
    identity: dict[str, tuple[str, str]] = {}
    for row in rows:
        identity.setdefault(row.uid, (row.namespace, row.name))
        facts[row.uid].append(
            Fact(
                field=row.field,
                from_value=row.from_value,
                to_value=row.to_value,
                at=row.at,
                seq=row.stream_seq,
                attributes=dict(row.attributes or {}),
                reason=row.reason,
            )
        )
    values: list[dict[str, Any]] = []
    for uid, found in facts.items():
        namespace, name = identity[uid]
        folded = msgspec.structs.asdict(fold_rayservice(found))
        values.append({"uid": uid, "namespace": namespace, "name": name, **folded})
    if values:
        stamps = {"ready_at", "upgrade_started_at", "upgraded_at", "updated_at"}
        view = sa.table("rayservices", *(sa.column(k, UtcDateTime() if k in stamps else None) for k in values[0]))
        op.bulk_insert(view, values)


def downgrade() -> None:
    op.drop_table("rayservices")
