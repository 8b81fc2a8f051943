"""The store's named volumes (docs/volumes.md): created, listed and deleted by the CLI; attached to one job
at a time and detached by the jobs' activities.

A mixin of `Store` (store.repository). The attachment is the one place where two writers may want the same
row at once (two jobs naming one volume): it is a check and a write in one transaction, the rows locked
first (PostgreSQL; SQLite's write transactions begin IMMEDIATE), so exactly one job gets a free volume.
Attaching again for the same job, or detaching twice, changes nothing: the activities may repeat.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine, Table, update
from sqlmodel import Session, col, select

from store.models import VolumeRecord
from store.sql import insert_ignore, row_of

_VOLUMES: Table = VolumeRecord.__table__  # type: ignore[attr-defined]


def volume_id(project: str, name: str) -> str:
    return f"{project}/{name}"


class VolumeInUse(RuntimeError):
    """A volume attached to a job cannot be deleted; `job` is that job's submission id."""

    def __init__(self, name: str, job: str) -> None:
        super().__init__(f"volume {name} is attached to job {job}: stop its run first")
        self.job = job


class VolumeRecords(ABC):
    """Named volumes; `Store` provides the engine and sessions."""

    engine: Engine
    _writer: Engine

    @abstractmethod
    def _session(self) -> AbstractContextManager[Session]: ...

    def create_volume(self, record: VolumeRecord) -> VolumeRecord:
        """Stores the volume unless one of its name exists in the project; the stored one, either way."""
        with self._writer.begin() as connection:
            insert_ignore(connection, _VOLUMES, [row_of(_VOLUMES, record)], ("id",))
        found = self.get_volume(record.project, record.name)
        assert found is not None  # inserted, or there already
        return found

    def get_volume(self, project: str, name: str) -> VolumeRecord | None:
        with self._session() as session:
            return session.get(VolumeRecord, volume_id(project, name))

    def list_volumes(self, project: str, names: list[str] | None = None) -> list[VolumeRecord]:
        """The project's volumes (those of `names` only, if given), by name."""
        statement = select(VolumeRecord).where(col(VolumeRecord.project) == project)
        if names is not None:
            statement = statement.where(col(VolumeRecord.name).in_(names))
        with self._session() as session:
            return list(session.exec(statement.order_by(col(VolumeRecord.name))).all())

    def delete_volume(self, project: str, name: str) -> VolumeRecord | None:
        """The volume forgotten, unless a job holds it (VolumeInUse); None if there is no such volume."""
        with self._writer.begin() as connection:
            rows = _locked(connection, [volume_id(project, name)])
            if not rows:
                return None
            [row] = rows
            if row["attached_to"] is not None:
                raise VolumeInUse(name, row["attached_to"])
            connection.execute(sa.delete(_VOLUMES).where(_VOLUMES.c.id == row["id"]))
            return VolumeRecord.model_validate(dict(row))

    def attach_volumes(
        self, project: str, names: list[str], job_id: str, instance: str, now: float
    ) -> str | None:
        """The volumes attached to the job, all or none: why not, or None when they are (or were already)."""
        ids = [volume_id(project, name) for name in names]
        with self._writer.begin() as connection:
            rows = {row["id"]: row for row in _locked(connection, ids)}
            for name, key in zip(names, ids, strict=True):
                row = rows.get(key)
                if row is None:
                    return f"volume {name} does not exist in project {project!r} (see ferry volume list)"
                if row["instance"] != instance:
                    return f"volume {name} is on instance {row['instance']}, the job was placed on {instance}"
                if row["attached_to"] not in (None, job_id):
                    return f"volume {name} is attached to job {row['attached_to']}"
            free = sa.or_(_VOLUMES.c.attached_to.is_(None), _VOLUMES.c.attached_to == job_id)
            connection.execute(
                update(_VOLUMES)
                .where(_VOLUMES.c.id.in_(ids), free)
                .values(attached_to=job_id, attached_at=now)
            )
        return None

    def detach_volumes(self, job_id: str) -> list[str]:
        """Every volume the job holds freed; their names (none: already detached)."""
        with self._writer.begin() as connection:
            held = connection.execute(
                sa.select(_VOLUMES.c.name).where(_VOLUMES.c.attached_to == job_id).order_by(_VOLUMES.c.name)
            ).scalars()
            names = list(held)
            connection.execute(
                update(_VOLUMES)
                .where(_VOLUMES.c.attached_to == job_id)
                .values(attached_to=None, attached_at=None)
            )
        return names


def _locked(connection: Connection, ids: list[str]) -> list[Any]:
    """The rows of these volumes, locked for the transaction (by id order, so two never deadlock)."""
    statement = sa.select(_VOLUMES).where(_VOLUMES.c.id.in_(ids)).order_by(_VOLUMES.c.id)
    if connection.dialect.name == "postgresql":
        statement = statement.with_for_update()
    return list(connection.execute(statement).mappings())
