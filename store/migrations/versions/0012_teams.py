"""Users with a global role, projects, and members with a project role
(docs/teams.md). An existing home keeps working: its first user becomes the global admin, every project its
records name (and `main`) is made, and its other users become managers of each (they could act on all).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29
"""

import time
from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STR = sqlmodel.sql.sqltypes.AutoString
DEFAULT_PROJECT = "main"  # core.settings.DEFAULT_PROJECT, as it was when this migration was written
_OWNED = ("runs", "fleets", "instances", "volumes", "secrets", "backends")


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        # A revoked token is a hash no token has (store.team_models.REVOKED), not NULL: the column stays as
        # the previous release has it (docs/upgrades.md: migrations only add).
        batch.add_column(sa.Column("role", _STR(), nullable=False, server_default="user"))
    op.create_table(
        "projects",
        sa.Column("name", _STR(), nullable=False),
        sa.Column("created_by", _STR(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "members",
        sa.Column("project", _STR(), nullable=False),
        sa.Column("user_name", _STR(), nullable=False),
        sa.Column("role", _STR(), nullable=False),
        sa.PrimaryKeyConstraint("project", "user_name"),
    )
    op.create_index("ix_members_user_name", "members", ["user_name"])
    _adopt_the_homes_records()


def _adopt_the_homes_records() -> None:
    # Plain SQL, no reads: the same in a migration run and in rendered SQL (alembic --sql).
    owned = " UNION ".join(
        [f"SELECT '{DEFAULT_PROJECT}' AS project", *(f"SELECT project FROM {t}" for t in _OWNED)]
    )
    op.execute(
        "INSERT INTO projects (name, created_by, created_at) "
        f"SELECT DISTINCT project, NULL, {time.time()} FROM ({owned}) AS owned"
    )
    op.execute(
        "UPDATE users SET role = 'admin' "
        "WHERE name = (SELECT name FROM users ORDER BY created_at, name LIMIT 1)"
    )
    op.execute(
        "INSERT INTO members (project, user_name, role) "
        "SELECT projects.name, users.name, 'manager' FROM projects CROSS JOIN users "
        "WHERE users.role <> 'admin'"
    )


def downgrade() -> None:
    op.drop_index("ix_members_user_name", table_name="members")
    op.drop_table("members")
    op.drop_table("projects")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("role")
