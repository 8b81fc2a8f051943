"""Backends: how a project's fleets create instances (docs/backends.md), the login key sealed; and what a
queued job waits for (a Slurm allocation's pending reason, for `ferry ps`).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table(
        "backends",
        sa.Column("id", _STR(), nullable=False),
        sa.Column("project", _STR(), nullable=False),
        sa.Column("name", _STR(), nullable=False),
        sa.Column("type", _STR(), nullable=False),
        sa.Column("configuration", sa.Text(), nullable=False),
        sa.Column("key_id", _STR(), nullable=False),
        sa.Column("sealed", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_backends_project", "backends", ["project"])
    # What a queued job waits for, where its fleet knows (a Slurm allocation's pending reason).
    with op.batch_alter_table("queued_jobs") as batch:
        batch.add_column(sa.Column("reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queued_jobs") as batch:
        batch.drop_column("reason")
    op.drop_index("ix_backends_project", table_name="backends")
    op.drop_table("backends")
