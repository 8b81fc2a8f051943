"""Runs, job submissions, eventlogs, log chunks and code archives.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As the models spell them: SQLite only autoincrements an INTEGER PRIMARY KEY.
_STR = sqlmodel.sql.sqltypes.AutoString
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", _STR(), nullable=False),
        sa.Column("project", _STR(), nullable=False),
        sa.Column("run_name", _STR(), nullable=False),
        sa.Column("user", _STR(), nullable=False),
        sa.Column("type", _STR(), nullable=False),
        sa.Column("status", _STR(), nullable=False),
        sa.Column("termination_reason", _STR(), nullable=True),
        sa.Column("status_message", sa.Text(), nullable=True),
        sa.Column("configuration", sa.Text(), nullable=False),
        sa.Column("code_hash", _STR(), nullable=True),
        sa.Column("submitted_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("workflow_id", _STR(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_runs_project_run_name", "runs", ["project", "run_name"])
    op.create_index("ix_runs_status", "runs", ["status"])

    op.create_table(
        "job_submissions",
        sa.Column("id", _STR(), nullable=False),
        sa.Column("run_id", _STR(), nullable=False),
        sa.Column("replica_num", sa.Integer(), nullable=False),
        sa.Column("job_num", sa.Integer(), nullable=False),
        sa.Column("submission_num", sa.Integer(), nullable=False),
        sa.Column("status", _STR(), nullable=False),
        sa.Column("termination_reason", _STR(), nullable=True),
        sa.Column("termination_message", sa.Text(), nullable=True),
        sa.Column("exit_status", sa.Integer(), nullable=True),
        sa.Column("instance_name", _STR(), nullable=True),
        sa.Column("submitted_at", sa.Float(), nullable=False),
        sa.Column("provisioned_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("log_size", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_job_submissions_run_id", "job_submissions", ["run_id"])

    op.create_table(
        "events",
        sa.Column("id", _BIG_ID, nullable=False),
        sa.Column("run_id", _STR(), nullable=False),
        sa.Column("job_submission_id", _STR(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("timestamp", sa.Float(), nullable=False),
        sa.Column("name", _STR(), nullable=False),
        sa.Column("context", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "job_submission_id", "seq", name="uq_events_run_job_seq"),
    )

    op.create_table(
        "log_chunks",
        sa.Column("id", _BIG_ID, nullable=False),
        sa.Column("job_submission_id", _STR(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("timestamp", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_submission_id", "offset", name="uq_log_chunks_job_offset"),
    )

    op.create_table(
        "code_archives",
        sa.Column("hash", _STR(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("hash"),
    )


def downgrade() -> None:
    op.drop_table("code_archives")
    op.drop_table("log_chunks")
    op.drop_table("events")
    op.drop_index("ix_job_submissions_run_id", table_name="job_submissions")
    op.drop_table("job_submissions")
    op.drop_index("ix_runs_status", table_name="runs")
    op.drop_index("ix_runs_project_run_name", table_name="runs")
    op.drop_table("runs")
