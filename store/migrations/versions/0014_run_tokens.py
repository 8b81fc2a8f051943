"""A job's token for Ferry's API, for a run with `dstack: true` (docs/teams.md#a-jobs-token).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table(
        "run_tokens",
        sa.Column("token_hash", _STR(), nullable=False),
        sa.Column("run_id", _STR(), nullable=False),
        sa.Column("project", _STR(), nullable=False),
        sa.Column("user_name", _STR(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("token_hash"),
    )
    op.create_index("ix_run_tokens_run_id", "run_tokens", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_run_tokens_run_id", table_name="run_tokens")
    op.drop_table("run_tokens")
