"""Secrets: a project's named values, sealed with Ferry's key (docs/secrets.md).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("id", _STR(), nullable=False),
        sa.Column("project", _STR(), nullable=False),
        sa.Column("name", _STR(), nullable=False),
        sa.Column("key_id", _STR(), nullable=False),
        sa.Column("sealed", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_secrets_project", "secrets", ["project"])


def downgrade() -> None:
    op.drop_index("ix_secrets_project", table_name="secrets")
    op.drop_table("secrets")
