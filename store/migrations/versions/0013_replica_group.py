"""A service replica's group: of a service with a router group, the proxies route to that group only
(docs/services.md#a-router-group).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    with op.batch_alter_table("service_replicas") as batch:
        batch.add_column(sa.Column("group_name", _STR(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("service_replicas") as batch:
        batch.drop_column("group_name")
