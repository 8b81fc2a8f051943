"""The store's fleets and instances: what `ferry fleet list` shows, and how a worker finds a host.

A mixin of `Store` (store.repository): idempotent writes, as activities may repeat them.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection, Engine, Table, delete, insert, update
from sqlmodel import Session, col, select

from core.fleets.status import FleetStatus
from core.wire.workflow_ids import parse_job_submission_id
from store.models import FleetRecord, InstanceRecord, QueuedJobRecord
from store.sql import row_of

_FLEETS: Table = FleetRecord.__table__  # type: ignore[attr-defined]
_INSTANCES: Table = InstanceRecord.__table__  # type: ignore[attr-defined]
_QUEUED: Table = QueuedJobRecord.__table__  # type: ignore[attr-defined]

# InstanceStatus.DELETED: core.fleets.placement brings pydantic and the configurations, too much for the
# CLI's every command to import with the store.
_INSTANCE_DELETED = "deleted"


def fleet_id(project: str, name: str) -> str:
    return f"{project}/{name}"


def instance_id(project: str, name: str) -> str:
    return f"{project}/{name}"


class FleetRecords(ABC):
    """Fleet and instance records; `Store` provides the engine, sessions and upserts."""

    engine: Engine
    _writer: Engine

    @abstractmethod
    def _session(self) -> AbstractContextManager[Session]: ...

    @abstractmethod
    def _update(self, table: Table, record_id: str, fields: dict[str, Any]) -> None: ...

    @abstractmethod
    def _upsert_row(
        self, table: Table, row: dict[str, Any], connection: Connection | None = None
    ) -> None: ...

    # Fleets

    def put_fleet(self, record: FleetRecord) -> None:
        """Inserts the fleet, or replaces every field of the stored one with the same id."""
        self._upsert_row(_FLEETS, row_of(_FLEETS, record))

    def get_fleet(self, project: str, name: str) -> FleetRecord | None:
        with self._session() as session:
            return session.get(FleetRecord, fleet_id(project, name))

    def update_fleet(self, project: str, name: str, **fields: Any) -> None:
        """Sets these fields (and updated_at unless given); RecordNotFoundError if there is no such fleet."""
        fields.setdefault("updated_at", time.time())
        self._update(_FLEETS, fleet_id(project, name), fields)

    def list_fleets(self, project: str, *, include_deleted: bool = False) -> list[FleetRecord]:
        """The project's fleets, newest first."""
        statement = select(FleetRecord).where(col(FleetRecord.project) == project)
        if not include_deleted:
            statement = statement.where(col(FleetRecord.status) != FleetStatus.DELETED)
        statement = statement.order_by(col(FleetRecord.created_at).desc(), col(FleetRecord.name))
        with self._session() as session:
            return list(session.exec(statement).all())

    def fleets_of_backend(self, backend: str) -> list[FleetRecord]:
        """Every project's fleets of this backend that are not deleted (a worker that starts tells each
        `local` one what its instance is now: docs/fleets.md#what-an-instance-is)."""
        statement = select(FleetRecord).where(
            col(FleetRecord.backend) == backend, col(FleetRecord.status) != FleetStatus.DELETED
        )
        with self._session() as session:
            return list(session.exec(statement.order_by(col(FleetRecord.id))).all())

    # Instances

    def put_instances(self, project: str, fleet: str, records: list[InstanceRecord]) -> None:
        """The fleet's instances as they are now: these upserted, any other one of the fleet deleted."""
        now = time.time()
        names = [record.name for record in records]
        with self._writer.begin() as connection:
            for record in records:
                self._upsert_row(_INSTANCES, row_of(_INSTANCES, record), connection)
            connection.execute(
                update(_INSTANCES)
                .where(
                    _INSTANCES.c.project == project,
                    _INSTANCES.c.fleet == fleet,
                    _INSTANCES.c.name.not_in(names),
                    _INSTANCES.c.status != _INSTANCE_DELETED,
                )
                .values(status=_INSTANCE_DELETED, busy_blocks=0, jobs=0, updated_at=now)
            )

    # Queues

    def put_queue(
        self, project: str, fleet: str, job_ids: list[str], why: dict[str, str] | None = None
    ) -> None:
        """The fleet's queue as it is now, in the order it is served: these jobs, no other of the fleet
        (an id that does not name a job submission is left out); `why`: what some of them wait for."""
        rows = []
        for position, job in enumerate(job_ids, start=1):
            named = parse_job_submission_id(job)
            if named is not None:
                run_id, replica, job_num, submission = named
                rows.append(
                    {
                        "project": project,
                        "fleet": fleet,
                        "job_submission_id": job,
                        "run_id": run_id,
                        "replica_num": replica,
                        "job_num": job_num,
                        "submission_num": submission,
                        "position": position,
                        "reason": (why or {}).get(job),
                    }
                )
        with self._writer.begin() as connection:
            connection.execute(delete(_QUEUED).where(_QUEUED.c.project == project, _QUEUED.c.fleet == fleet))
            if rows:
                connection.execute(insert(_QUEUED), rows)

    def queued_jobs(self, run_id: str) -> list[QueuedJobRecord]:
        """The run's jobs that some fleet holds in its queue."""
        statement = select(QueuedJobRecord).where(col(QueuedJobRecord.run_id) == run_id)
        with self._session() as session:
            return list(session.exec(statement).all())

    def list_instances(
        self, project: str, fleet: str | None = None, *, include_deleted: bool = False
    ) -> list[InstanceRecord]:
        """The project's instances (of one fleet if given), by fleet and name."""
        statement = select(InstanceRecord).where(col(InstanceRecord.project) == project)
        if fleet is not None:
            statement = statement.where(col(InstanceRecord.fleet) == fleet)
        if not include_deleted:
            statement = statement.where(col(InstanceRecord.status) != _INSTANCE_DELETED)
        statement = statement.order_by(col(InstanceRecord.fleet), col(InstanceRecord.name))
        with self._session() as session:
            return list(session.exec(statement).all())

    def find_instance(self, name: str) -> InstanceRecord | None:
        """The instance of this name that is not deleted, in any project (names are unique among those)."""
        statement = (
            select(InstanceRecord)
            .where(col(InstanceRecord.name) == name, col(InstanceRecord.status) != _INSTANCE_DELETED)
            .order_by(col(InstanceRecord.updated_at).desc())
            .limit(1)
        )
        with self._session() as session:
            return session.exec(statement).first()
