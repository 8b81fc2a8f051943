"""Who changed a project's secrets (docs/teams.md#who-did-it): `secrets.updated_by`, and the `changes` kept
for every set, change and deletion.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    with op.batch_alter_table("secrets") as batch:
        batch.add_column(sa.Column("updated_by", _STR(), nullable=True))
    op.create_table(
        "changes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("project", _STR(), nullable=False),
        sa.Column("actor", _STR(), nullable=False),
        sa.Column("subject", _STR(), nullable=False),
        sa.Column("name", _STR(), nullable=False),
        sa.Column("change", _STR(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_changes_project", "changes", ["project"])


def downgrade() -> None:
    op.drop_index("ix_changes_project", table_name="changes")
    op.drop_table("changes")
    with op.batch_alter_table("secrets") as batch:
        batch.drop_column("updated_by")
