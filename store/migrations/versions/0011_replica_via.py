"""How a service replica is reached: through a backend's login node (its id), or directly (NULL)
(docs/services.md#replicas-behind-a-login-node).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    with op.batch_alter_table("service_replicas") as batch:
        batch.add_column(sa.Column("via", _STR(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("service_replicas") as batch:
        batch.drop_column("via")
