"""The store's users, projects and members (docs/teams.md): who the API's callers are and where they belong.

A mixin of `Store` (store.repository). Tokens are stored as their hashes only; a revoked token's user keeps
their name, role and memberships, with a hash no token has (store.team_models.REVOKED) until given a new one.
"""

from __future__ import annotations

import secrets
import time
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager

import sqlalchemy as sa
from sqlalchemy import Engine, Table
from sqlmodel import Session, col, select

from core.status import RunStatus
from core.teams.roles import Caller, GlobalRole, ProjectRole
from store.models import RunRecord
from store.sql import insert_ignore, upsert
from store.team_models import REVOKED, MemberRecord, ProjectRecord, RunTokenRecord, UserRecord, has_token

_USERS: Table = UserRecord.__table__  # type: ignore[attr-defined]
_PROJECTS: Table = ProjectRecord.__table__  # type: ignore[attr-defined]
_MEMBERS: Table = MemberRecord.__table__  # type: ignore[attr-defined]
_RUN_TOKENS: Table = RunTokenRecord.__table__  # type: ignore[attr-defined]
# The tables whose rows belong to a project (a fixed list: the names go into SQL).
_HOLDINGS = ("runs", "fleets", "volumes", "secrets", "backends")


class TeamRecords(ABC):
    """Users, projects and members; `Store` provides the engine and sessions."""

    engine: Engine
    _writer: Engine

    @abstractmethod
    def _session(self) -> AbstractContextManager[Session]: ...

    # Users

    def put_user(self, name: str, token_hash: str) -> None:
        """The user's token is now the one with this hash (a new user, or a new token). The first user of a
        store with no admin becomes its global admin (docs/teams.md#the-first-user)."""
        with self._writer.begin() as connection:
            row = {"name": name, "token_hash": token_hash, "created_at": time.time()}
            upsert(connection, _USERS, row, keep=("created_at",))
            admins = sa.select(sa.func.count()).select_from(_USERS).where(_USERS.c.role == GlobalRole.ADMIN)
            if connection.execute(admins).scalar_one() == 0:
                connection.execute(
                    sa.update(_USERS).where(_USERS.c.name == name).values(role=GlobalRole.ADMIN)
                )

    def add_user(self, name: str, role: GlobalRole, token_hash: str) -> bool:
        """Whether the user was added (False: one of that name exists, and is left as it is)."""
        with self._writer.begin() as connection:
            if connection.execute(sa.select(_USERS.c.name).where(_USERS.c.name == name)).first() is not None:
                return False
            row = {"name": name, "token_hash": token_hash, "role": role.value, "created_at": time.time()}
            insert_ignore(connection, _USERS, [row], key=("name",))
        return True

    def get_user(self, name: str) -> UserRecord | None:
        with self._session() as session:
            return session.get(UserRecord, name)

    def list_users(self) -> list[UserRecord]:
        with self._session() as session:
            return list(session.exec(select(UserRecord).order_by(col(UserRecord.name))).all())

    def set_user_role(self, name: str, role: GlobalRole) -> bool:
        """Whether there was such a user."""
        with self._writer.begin() as connection:
            changed = connection.execute(
                sa.update(_USERS).where(_USERS.c.name == name).values(role=role.value)
            )
        return bool(changed.rowcount)

    def set_token_hash(self, name: str, token_hash: str | None) -> bool:
        """The user's token is now the one with this hash (None: revoked, no token opens anything as them).
        Whether there was such a user."""
        stored = token_hash if token_hash is not None else REVOKED + secrets.token_hex(16)
        with self._writer.begin() as connection:
            update = sa.update(_USERS).where(_USERS.c.name == name).values(token_hash=stored)
            return bool(connection.execute(update).rowcount)

    def user_for_token_hash(self, token_hash: str) -> str | None:
        statement = select(UserRecord.name).where(col(UserRecord.token_hash) == token_hash)
        with self._session() as session:
            return session.exec(statement).first()

    def admins(self) -> frozenset[str]:
        statement = select(UserRecord.name).where(col(UserRecord.role) == GlobalRole.ADMIN.value)
        with self._session() as session:
            return frozenset(session.exec(statement).all())

    def caller_for_token_hash(self, token_hash: str) -> Caller | None:
        """The API's caller for a token: who, their global role and their projects; None for a token that
        opens nothing (unknown or revoked)."""
        # One statement, without the ORM's session: every API request asks it (docs/teams.md#the-api).
        statement = (
            sa.select(_USERS.c.name, _USERS.c.role, _MEMBERS.c.project, _MEMBERS.c.role.label("member_role"))
            .select_from(_USERS.outerjoin(_MEMBERS, _MEMBERS.c.user_name == _USERS.c.name))
            .where(_USERS.c.token_hash == token_hash)
        )
        with self.engine.connect() as connection:
            rows = connection.execute(statement).all()
        if not rows:
            with self._session() as session:
                return _run_token_caller(session, token_hash)
        projects = {row.project: ProjectRole(row.member_role) for row in rows if row.project is not None}
        return Caller(rows[0].name, GlobalRole(rows[0].role), projects)

    def put_run_token(self, token_hash: str, run_id: str, project: str, user_name: str) -> None:
        """A job's token (docs/teams.md#a-jobs-token), kept as its hash; gone with its run."""
        row = {"token_hash": token_hash, "run_id": run_id, "project": project, "user_name": user_name}
        with self._writer.begin() as connection:
            insert_ignore(connection, _RUN_TOKENS, [{**row, "created_at": time.time()}], key=("token_hash",))

    # Projects and members

    def add_project(self, name: str, created_by: str | None) -> bool:
        """Whether the project was made (False: it exists)."""
        with self._writer.begin() as connection:
            if connection.execute(sa.select(_PROJECTS.c.name).where(_PROJECTS.c.name == name)).first():
                return False
            row = {"name": name, "created_by": created_by, "created_at": time.time()}
            insert_ignore(connection, _PROJECTS, [row], key=("name",))
        return True

    def list_projects(self) -> list[ProjectRecord]:
        with self._session() as session:
            return list(session.exec(select(ProjectRecord).order_by(col(ProjectRecord.name))).all())

    def delete_project(self, name: str) -> bool:
        """Whether there was such a project; its memberships go with it."""
        with self._writer.begin() as connection:
            connection.execute(sa.delete(_MEMBERS).where(_MEMBERS.c.project == name))
            return bool(connection.execute(sa.delete(_PROJECTS).where(_PROJECTS.c.name == name)).rowcount)

    def project_holdings(self, name: str) -> dict[str, int]:
        """What the project still holds, by table (runs, fleets, volumes, secrets, backends), only those with
        rows: a project is deleted only once it holds nothing (docs/teams.md#projects)."""
        found = {}
        with self.engine.connect() as connection:
            for table in _HOLDINGS:
                statement = sa.text(f"SELECT COUNT(*) FROM {table} WHERE project = :project")
                count = int(connection.execute(statement, {"project": name}).scalar_one())
                if count:
                    found[table] = count
        return found

    def set_member(self, project: str, user: str, role: ProjectRole) -> None:
        """The user is now a member of the project with this role."""
        with self._writer.begin() as connection:
            row = {"project": project, "user_name": user, "role": role.value}
            upsert(connection, _MEMBERS, row, keep=())

    def remove_member(self, project: str, user: str) -> bool:
        """Whether the user was a member."""
        with self._writer.begin() as connection:
            where = (_MEMBERS.c.project == project) & (_MEMBERS.c.user_name == user)
            return bool(connection.execute(sa.delete(_MEMBERS).where(where)).rowcount)

    def members(self, project: str) -> list[MemberRecord]:
        statement = select(MemberRecord).where(col(MemberRecord.project) == project)
        with self._session() as session:
            return list(session.exec(statement.order_by(col(MemberRecord.user_name))).all())


def _run_token_caller(session: Session, token_hash: str) -> Caller | None:
    """A job's token's caller: its user, as a project `user` of its run's project only, while the run is
    active and the user still has a token and belongs there (docs/teams.md#a-jobs-token)."""
    token = session.get(RunTokenRecord, token_hash)
    if token is None:
        return None
    run = session.get(RunRecord, token.run_id)
    user = session.get(UserRecord, token.user_name)
    if run is None or RunStatus(run.status).is_finished() or user is None or not has_token(user):
        return None
    member = session.get(MemberRecord, (token.project, user.name))
    if member is None and user.role != GlobalRole.ADMIN:
        return None
    return Caller(user.name, GlobalRole.USER, {token.project: ProjectRole.USER}, job_of=run.id)
