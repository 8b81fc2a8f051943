"""Fleets and their instances; a job submission's status message.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.add_column("job_submissions", sa.Column("status_message", sa.Text(), nullable=True))

    op.create_table(
        "fleets",
        sa.Column("id", _STR(), nullable=False),
        sa.Column("project", _STR(), nullable=False),
        sa.Column("name", _STR(), nullable=False),
        sa.Column("backend", _STR(), nullable=False),
        sa.Column("configuration", sa.Text(), nullable=False),
        sa.Column("status", _STR(), nullable=False),
        sa.Column("workflow_id", _STR(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_fleets_project_status", "fleets", ["project", "status"])

    op.create_table(
        "instances",
        sa.Column("id", _STR(), nullable=False),
        sa.Column("project", _STR(), nullable=False),
        sa.Column("fleet", _STR(), nullable=False),
        sa.Column("name", _STR(), nullable=False),
        sa.Column("address", _STR(), nullable=False),
        sa.Column("status", _STR(), nullable=False),
        sa.Column("status_message", sa.Text(), nullable=True),
        sa.Column("resources", sa.Text(), nullable=False),
        sa.Column("blocks", sa.Integer(), nullable=True),
        sa.Column("busy_blocks", sa.Integer(), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_instances_project_fleet", "instances", ["project", "fleet"])
    op.create_index("ix_instances_name", "instances", ["name"])


def downgrade() -> None:
    op.drop_index("ix_instances_name", table_name="instances")
    op.drop_index("ix_instances_project_fleet", table_name="instances")
    op.drop_table("instances")
    op.drop_index("ix_fleets_project_status", table_name="fleets")
    op.drop_table("fleets")
    with op.batch_alter_table("job_submissions") as batch:
        batch.drop_column("status_message")
