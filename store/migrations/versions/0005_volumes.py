"""Named volumes: a directory on one instance of a fleet, attached to one job at a time.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table(
        "volumes",
        sa.Column("id", _STR(), nullable=False),
        sa.Column("project", _STR(), nullable=False),
        sa.Column("name", _STR(), nullable=False),
        sa.Column("fleet", _STR(), nullable=False),
        sa.Column("instance", _STR(), nullable=False),
        sa.Column("configuration", sa.Text(), nullable=False),
        sa.Column("attached_to", _STR(), nullable=True),
        sa.Column("attached_at", sa.Float(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_volumes_project", "volumes", ["project"])
    op.create_index("ix_volumes_attached_to", "volumes", ["attached_to"])


def downgrade() -> None:
    op.drop_index("ix_volumes_attached_to", table_name="volumes")
    op.drop_index("ix_volumes_project", table_name="volumes")
    op.drop_table("volumes")
