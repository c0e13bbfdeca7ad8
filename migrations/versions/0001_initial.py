"""The history tables: command audit trail, transitions, resources.

Revision ID: 0001
Revises:
Create Date: 2026-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TS = sa.DateTime(timezone=True)


def _text(name: str) -> sa.Column[str]:
    return sa.Column(name, sa.Text(), nullable=False)


def upgrade() -> None:
    op.create_table(
        "commands",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
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
    )
    op.create_index("ix_commands_kind_namespace_name_id", "commands", ["kind", "namespace", "name", "id"])

    op.create_table(
        "transitions",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        _text("kind"),
        _text("uid"),
        _text("namespace"),
        _text("name"),
        _text("field"),
        _text("from_value"),
        _text("to_value"),
        _text("reason"),
        _text("message"),
        _text("resource_version"),
        sa.Column("at", TS, nullable=False),
        _text("trace_id"),
        sa.Column("attributes", JSON, nullable=False),
        sa.Column("stream_seq", sa.BigInteger(), nullable=False),
        _text("batch_id"),
        _text("command_id"),
        sa.PrimaryKeyConstraint("id", name="pk_transitions"),
        sa.UniqueConstraint(
            "uid",
            "field",
            "from_value",
            "to_value",
            "resource_version",
            name="uq_transitions_uid_field_from_value_to_value_resource_version",
        ),
    )
    op.create_index("ix_transitions_uid_at_id", "transitions", ["uid", "at", "id"])

    op.create_table(
        "resources",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        _text("uid"),
        _text("kind"),
        _text("namespace"),
        _text("name"),
        _text("status"),
        sa.Column("first_seen", TS, nullable=False),
        sa.Column("deleted_at", TS, nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("fields", JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_resources"),
        sa.UniqueConstraint("uid", name="uq_resources_uid"),
    )
    op.create_index(
        "ix_resources_kind_namespace_name_first_seen", "resources", ["kind", "namespace", "name", "first_seen"]
    )
    op.create_index("ix_resources_kind_updated_at", "resources", ["kind", "updated_at"])


def downgrade() -> None:
    op.drop_table("resources")
    op.drop_table("transitions")
    op.drop_table("commands")
