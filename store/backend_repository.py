"""The store's backends (docs/backends.md): recorded by `ferry apply -f slurm.yml`, read by the fleets'
provisioning activities (activities/provisioning.py).

A mixin of `Store` (store.repository). The login key a backend names is read at apply and sealed before
it reaches the store, bound to the backend's project and name (`seal_backend`, `open_backend_key`), as a
secret's value is (store.secret_repository): the store never holds it in clear.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager

import sqlalchemy as sa
from sqlalchemy import Engine, Table
from sqlmodel import Session, col, select

from store.keys import Keys
from store.models import BackendRecord
from store.sql import row_of, upsert

_BACKENDS: Table = BackendRecord.__table__  # type: ignore[attr-defined]


def backend_id(project: str, name: str) -> str:
    return f"{project}/{name}"


def _context(project: str, name: str) -> bytes:
    return f"ferry backend {backend_id(project, name)}".encode()


def seal_backend(
    keys: Keys,
    project: str,
    name: str,
    type_: str,
    configuration: str,
    login_key: str,
    now: float | None = None,
) -> BackendRecord:
    now = time.time() if now is None else now
    key_id, sealed = keys.seal(login_key.encode(), _context(project, name))
    return BackendRecord(
        id=backend_id(project, name),
        project=project,
        name=name,
        type=type_,
        configuration=configuration,
        key_id=key_id,
        sealed=sealed,
        created_at=now,
        updated_at=now,
    )


def open_backend_key(keys: Keys, record: BackendRecord) -> str:
    """The login's private key; store.keys.SealError if this process's keys cannot open it."""
    return keys.unseal(record.key_id, record.sealed, _context(record.project, record.name)).decode()


class BackendRecords(ABC):
    """A project's backends; `Store` provides the engine and sessions."""

    engine: Engine
    _writer: Engine

    @abstractmethod
    def _session(self) -> AbstractContextManager[Session]: ...

    def put_backend(self, record: BackendRecord) -> None:
        """Stores the backend, or replaces the one of its name (its created_at kept)."""
        with self._writer.begin() as connection:
            upsert(connection, _BACKENDS, row_of(_BACKENDS, record), keep=("created_at",))

    def get_backend(self, project: str, name: str) -> BackendRecord | None:
        with self._session() as session:
            return session.get(BackendRecord, backend_id(project, name))

    def list_backends(self, project: str) -> list[BackendRecord]:
        statement = select(BackendRecord).where(col(BackendRecord.project) == project)
        with self._session() as session:
            return list(session.exec(statement.order_by(col(BackendRecord.name))).all())

    def delete_backend(self, project: str, name: str) -> bool:
        with self._writer.begin() as connection:
            deleted = connection.execute(
                sa.delete(_BACKENDS).where(_BACKENDS.c.id == backend_id(project, name))
            )
        return bool(deleted.rowcount)
