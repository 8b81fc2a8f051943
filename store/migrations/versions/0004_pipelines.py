"""Pipelines: a run of several tasks in sequence; each task's own run names its pipeline and place.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("pipeline_id", _STR(), nullable=True))
        batch.add_column(sa.Column("task_num", sa.Integer(), nullable=True))
        batch.create_index("ix_runs_pipeline_id", ["pipeline_id"])


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_pipeline_id")
        batch.drop_column("task_num")
        batch.drop_column("pipeline_id")
