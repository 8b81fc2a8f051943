"""Services: replicas the proxies route to, the proxies themselves, drains, request counts, users.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STR = sqlmodel.sql.sqltypes.AutoString
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "service_replicas",
        sa.Column("id", _STR(), nullable=False),
        sa.Column("run_id", _STR(), nullable=False),
        sa.Column("replica_num", sa.Integer(), nullable=False),
        sa.Column("submission_num", sa.Integer(), nullable=False),
        sa.Column("deployment_num", sa.Integer(), nullable=False),
        sa.Column("url", _STR(), nullable=False),
        sa.Column("state", _STR(), nullable=False),
        sa.Column("probes", sa.Text(), nullable=False),
        sa.Column("registered_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_service_replicas_run_id", "service_replicas", ["run_id"])

    op.create_table(
        "gateways",
        sa.Column("id", _STR(), nullable=False),
        sa.Column("url", _STR(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("seen_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )

    op.create_table(
        "replica_drains",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("replica_id", _STR(), nullable=False),
        sa.Column("gateway_id", _STR(), nullable=False),
        sa.Column("drained_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("replica_id", "gateway_id", name="uq_replica_drains"),
    )

    op.create_table(
        "service_requests",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("run_id", _STR(), nullable=False),
        sa.Column("gateway_id", _STR(), nullable=False),
        sa.Column("second", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "gateway_id", "second", name="uq_service_requests"),
    )
    op.create_index("ix_service_requests_second", "service_requests", ["second"])

    op.create_table(
        "users",
        sa.Column("name", _STR(), nullable=False),
        sa.Column("token_hash", _STR(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_index("ix_users_token_hash", "users", ["token_hash"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_users_token_hash", table_name="users")
    op.drop_table("users")
    op.drop_index("ix_service_requests_second", table_name="service_requests")
    op.drop_table("service_requests")
    op.drop_table("replica_drains")
    op.drop_table("gateways")
    op.drop_index("ix_service_replicas_run_id", table_name="service_replicas")
    op.drop_table("service_replicas")
