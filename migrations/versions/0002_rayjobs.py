"""The RayJob view: submission mode, job id, cluster, statuses, attempts, start and end per RayJob uid.

Additive: a new table keyed by ``resources.uid``, filled by the consumer (``projection.fold_rayjob``
over a RayJob's transitions, recomputed in the transaction that persists them). It shipped together with
0001, so no database holds RayJob history without it and there is nothing to backfill; a view added to
a database that already has history (0003's RayService view) backfills with the same fold.

Revision ID: 0002
Revises: 0001
Create Date: 2026-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def _text(name: str) -> sa.Column[str]:
    return sa.Column(name, sa.Text(), nullable=False)


def upgrade() -> None:
    op.create_table(
        "rayjobs",
        sa.Column("uid", sa.Text(), nullable=False),
        _text("namespace"),
        _text("name"),
        _text("submission_mode"),
        _text("job_id"),
        _text("cluster_name"),
        _text("deployment_status"),
        _text("job_status"),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("ended_at", TS, nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("uid", name="pk_rayjobs"),
        sa.ForeignKeyConstraint(["uid"], ["resources.uid"], name="fk_rayjobs_uid_resources"),
    )
    op.create_index("ix_rayjobs_namespace_name", "rayjobs", ["namespace", "name"])


def downgrade() -> None:
    op.drop_table("rayjobs")
