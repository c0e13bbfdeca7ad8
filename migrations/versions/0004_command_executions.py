"""The audit trail records every execution of a command, not only the first.

A batch redelivered after its applier died runs its commands again; each run now has its own row,
identified by the batch's stored message (``batch_seq``), its delivery (``delivery``, new) and the
command. Rows recorded before this revision were first executions as far as anyone knows: they get
``delivery`` 1.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


TS = sa.DateTime(timezone=True)


def _text(name: str) -> sa.Column[str]:
    return sa.Column(name, sa.Text(), nullable=False)


def _commands_before() -> sa.Table:
    """``commands`` as 0001 made it: SQLite changes constraints by copying the table, and the offline
    (``--sql``) mode cannot read the table from a database."""
    return sa.Table(
        "commands",
        sa.MetaData(),
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        _text("batch_id"),
        _text("command_id"),
        sa.Column("batch_seq", sa.BigInteger(), nullable=False),
        _text("verb"),
        _text("target"),
        _text("kind"),
        _text("namespace"),
        _text("name"),
        _text("outcome"),
        _text("error"),
        sa.Column("status_code", sa.BigInteger(), nullable=False),
        _text("resource_version"),
        sa.Column("at", TS, nullable=False),
        _text("trace_id"),
        sa.Column("stream_seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_commands"),
        sa.UniqueConstraint("batch_id", "command_id", name="uq_commands_batch_id_command_id"),
        sa.Index("ix_commands_kind_namespace_name_id", "kind", "namespace", "name", "id"),
    )


def upgrade() -> None:
    # existing rows were first executions as far as anyone knows: delivery 1
    with op.batch_alter_table("commands", copy_from=_commands_before()) as batch:
        batch.add_column(sa.Column("delivery", sa.BigInteger(), nullable=False, server_default="1"))
        batch.drop_constraint("uq_commands_batch_id_command_id", type_="unique")
        batch.create_unique_constraint(
            "uq_commands_batch_id_command_id_batch_seq_delivery", ["batch_id", "command_id", "batch_seq", "delivery"]
        )


def downgrade() -> None:
    # keeps the first execution of each command, as the audit did before
    op.execute("DELETE FROM commands WHERE id NOT IN (SELECT MIN(id) FROM commands GROUP BY batch_id, command_id)")
    with op.batch_alter_table("commands") as batch:
        batch.drop_constraint("uq_commands_batch_id_command_id_batch_seq_delivery", type_="unique")
        batch.create_unique_constraint("uq_commands_batch_id_command_id", ["batch_id", "command_id"])
        batch.drop_column("delivery")
