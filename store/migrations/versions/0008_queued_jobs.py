"""The jobs each fleet holds in its queue (`ferry ps`: waiting for capacity), as the fleet records them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "queued_jobs",
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("fleet", sa.String(), nullable=False),
        sa.Column("job_submission_id", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("replica_num", sa.Integer(), nullable=False),
        sa.Column("job_num", sa.Integer(), nullable=False),
        sa.Column("submission_num", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("project", "fleet", "job_submission_id"),
    )
    op.create_index("ix_queued_jobs_job_submission_id", "queued_jobs", ["job_submission_id"])
    op.create_index("ix_queued_jobs_run_id", "queued_jobs", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_queued_jobs_run_id", table_name="queued_jobs")
    op.drop_index("ix_queued_jobs_job_submission_id", table_name="queued_jobs")
    op.drop_table("queued_jobs")
