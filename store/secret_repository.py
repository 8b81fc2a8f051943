"""The store's secrets (docs/secrets.md): set, listed and deleted by `ferry secret`; opened by the step that
sends a job to its agent (activities/secrets.py), and by nothing else.

A mixin of `Store` (store.repository). A value is sealed before it reaches the store and opened after it
leaves (`seal_secret`, `open_secret`), bound to its project and name: a row copied under another name
does not open.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager

import sqlalchemy as sa
from sqlalchemy import Engine, Table
from sqlmodel import Session, col, select

from store.change_repository import insert_change
from store.keys import Keys
from store.models import SecretRecord
from store.sql import row_of, upsert

_SECRETS: Table = SecretRecord.__table__  # type: ignore[attr-defined]


def secret_id(project: str, name: str) -> str:
    return f"{project}/{name}"


def _context(project: str, name: str) -> bytes:
    return f"ferry secret {secret_id(project, name)}".encode()


def seal_secret(
    keys: Keys, project: str, name: str, value: str, now: float | None = None, *, by: str | None = None
) -> SecretRecord:
    """The record of a secret's value, sealed; `by`: who sets it."""
    now = time.time() if now is None else now
    key_id, sealed = keys.seal(value.encode(), _context(project, name))
    return SecretRecord(
        id=secret_id(project, name),
        project=project,
        name=name,
        key_id=key_id,
        sealed=sealed,
        created_at=now,
        updated_at=now,
        updated_by=by,
    )


def open_secret(keys: Keys, record: SecretRecord) -> str:
    """Its value; store.keys.SealError if this process's keys cannot open it."""
    return keys.unseal(record.key_id, record.sealed, _context(record.project, record.name)).decode()


class SecretRecords(ABC):
    """A project's secrets; `Store` provides the engine and sessions."""

    engine: Engine
    _writer: Engine

    @abstractmethod
    def _session(self) -> AbstractContextManager[Session]: ...

    def put_secret(self, record: SecretRecord) -> bool:
        """Stores the secret, or replaces the value of the one of its name (its created_at kept), and the
        change by its `updated_by` (OPERATOR if None); whether it is new."""
        with self._writer.begin() as connection:
            found = connection.execute(sa.select(_SECRETS.c.id).where(_SECRETS.c.id == record.id)).first()
            upsert(connection, _SECRETS, row_of(_SECRETS, record), keep=("created_at",))
            change = "changed" if found is not None else "set"
            insert_change(
                connection,
                record.project,
                record.updated_by,
                "secret",
                record.name,
                change,
                record.updated_at,
            )
        return found is None

    def get_secret(self, project: str, name: str) -> SecretRecord | None:
        with self._session() as session:
            return session.get(SecretRecord, secret_id(project, name))

    def list_secrets(self, project: str, names: list[str] | None = None) -> list[SecretRecord]:
        """The project's secrets (those of `names` only, if given), by name."""
        statement = select(SecretRecord).where(col(SecretRecord.project) == project)
        if names is not None:
            statement = statement.where(col(SecretRecord.name).in_(names))
        with self._session() as session:
            return list(session.exec(statement.order_by(col(SecretRecord.name))).all())

    def delete_secret(self, project: str, name: str, by: str | None = None) -> bool:
        """Whether there was such a secret to delete; its deletion kept as a change by `by` (OPERATOR if
        None)."""
        with self._writer.begin() as connection:
            deleted = connection.execute(sa.delete(_SECRETS).where(_SECRETS.c.id == secret_id(project, name)))
            if deleted.rowcount:
                insert_change(connection, project, by, "secret", name, "deleted", time.time())
        return bool(deleted.rowcount)
