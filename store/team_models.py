"""The store's users, projects and members (docs/teams.md): who may use a shared Ferry, and where.

A user's token is kept as its SHA-256 hash only (REVOKED and a random tail once revoked, until an admin
gives them a new one); their `role` is the global one (core.teams.roles.GlobalRole). A member is a user in
one project with a project role (core.teams.roles.ProjectRole). No foreign keys, as in every table
(store.models).
"""

import time

from sqlmodel import Field, SQLModel

# A revoked user's token_hash: no token hashes to it (a SHA-256 hex has no `:`); unique by its random tail.
REVOKED = "revoked:"


def has_token(user: "UserRecord") -> bool:
    return not user.token_hash.startswith(REVOKED)


class UserRecord(SQLModel, table=True):
    """A user, their global role and the hash of their token (what the API and every proxy check)."""

    __tablename__ = "users"

    name: str = Field(primary_key=True)
    token_hash: str = Field(index=True, unique=True)  # sha256 hex, or REVOKED and a random tail
    role: str = Field(default="user", sa_column_kwargs={"server_default": "user"})
    created_at: float = Field(default_factory=time.time)


class ProjectRecord(SQLModel, table=True):
    """A project: what runs, fleets, backends, volumes, secrets and schedules belong to."""

    __tablename__ = "projects"

    name: str = Field(primary_key=True)
    created_by: str | None = None  # None: made by a migration, for what an existing home held
    created_at: float = Field(default_factory=time.time)


class MemberRecord(SQLModel, table=True):
    """A user's role in one project."""

    __tablename__ = "members"

    project: str = Field(primary_key=True)
    user_name: str = Field(primary_key=True, index=True)
    role: str


class RunTokenRecord(SQLModel, table=True):
    """A job's token for Ferry's API (`dstack: true`, docs/teams.md#a-jobs-token): its user's runs in its
    run's project only, as a project `user`, while the run is active and its user may act there."""

    __tablename__ = "run_tokens"

    token_hash: str = Field(primary_key=True)  # sha256 hex
    run_id: str = Field(index=True)
    project: str
    user_name: str
    created_at: float = Field(default_factory=time.time)


class ChangeRecord(SQLModel, table=True):
    """Who changed one of a project's things, and how (docs/teams.md#who-did-it): a secret set, changed or
    deleted; kept, never rewritten, so that what is gone still has its actor."""

    __tablename__ = "changes"

    id: int | None = Field(default=None, primary_key=True)
    at: float = Field(default_factory=time.time)
    project: str = Field(index=True)
    actor: str  # the user whose token made it; `operator` for a CLI that reached the store itself
    subject: str  # what kind of thing: `secret`
    name: str
    change: str  # `set`, `changed`, `deleted`
