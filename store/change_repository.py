"""Who changed a project's things (docs/teams.md#who-did-it): each change of a secret or a fleet kept in the
store's `changes`, with its actor, and never rewritten, so that what is gone still has its actor.

A mixin of `Store` (store.repository); `insert_change` also writes one within another table's transaction
(store.secret_repository)."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager

import sqlalchemy as sa
from sqlalchemy import Engine, Table
from sqlmodel import Session, col, select

from store.team_models import ChangeRecord

_CHANGES: Table = ChangeRecord.__table__  # type: ignore[attr-defined]
OPERATOR = "operator"  # the actor of a change made by a CLI that reached the store itself


def insert_change(
    connection: sa.Connection,
    project: str,
    actor: str | None,
    subject: str,
    name: str,
    change: str,
    at: float,
) -> None:
    row = {"at": at, "project": project, "actor": actor or OPERATOR, "subject": subject, "name": name}
    connection.execute(sa.insert(_CHANGES).values(**row, change=change))


class ChangeRecords(ABC):
    engine: Engine
    _writer: Engine

    @abstractmethod
    def _session(self) -> AbstractContextManager[Session]: ...

    def record_change(self, project: str, actor: str | None, subject: str, name: str, change: str) -> None:
        """`actor` (None: the operator) made `change` to the project's `subject` `name`."""
        with self._writer.begin() as connection:
            insert_change(connection, project, actor, subject, name, change, time.time())

    def list_changes(self, project: str, limit: int = 100) -> list[ChangeRecord]:
        """The project's latest changes, oldest first."""
        statement = (
            select(ChangeRecord)
            .where(col(ChangeRecord.project) == project)
            .order_by(col(ChangeRecord.id).desc())
            .limit(limit)
        )
        with self._session() as session:
            return list(reversed(session.exec(statement).all()))
