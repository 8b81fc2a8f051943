"""Forgetting a finished run (`ferry delete`, docs/cli.md#delete): every row the run left, in one
transaction, so that a delete that fails half-way leaves the run whole.

A mixin of `Store` (store.repository). A pipeline's task runs go with their pipeline. The run's code
archive goes too, unless another run still refers to the same archive (archives are shared by content).
"""

from __future__ import annotations

from abc import ABC
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy import Connection, Engine, Table

from core.status import RunStatus
from store.models import (
    CodeArchiveRecord,
    EventRecord,
    JobSubmissionRecord,
    LogChunkRecord,
    QueuedJobRecord,
    ReplicaDrainRecord,
    RunRecord,
    ServiceReplicaRecord,
    ServiceRequestsRecord,
)
from store.team_models import RunTokenRecord

_RUNS: Table = RunRecord.__table__  # type: ignore[attr-defined]
_JOBS: Table = JobSubmissionRecord.__table__  # type: ignore[attr-defined]
_EVENTS: Table = EventRecord.__table__  # type: ignore[attr-defined]
_CHUNKS: Table = LogChunkRecord.__table__  # type: ignore[attr-defined]
_CODE: Table = CodeArchiveRecord.__table__  # type: ignore[attr-defined]
_REPLICAS: Table = ServiceReplicaRecord.__table__  # type: ignore[attr-defined]
_DRAINS: Table = ReplicaDrainRecord.__table__  # type: ignore[attr-defined]
_REQUESTS: Table = ServiceRequestsRecord.__table__  # type: ignore[attr-defined]
_QUEUED: Table = QueuedJobRecord.__table__  # type: ignore[attr-defined]
_RUN_TOKENS: Table = RunTokenRecord.__table__  # type: ignore[attr-defined]


class RunStillActive(RuntimeError):
    """The run (or one of its pipeline's tasks) has not finished: it is not deleted."""


@dataclass(frozen=True)
class DeletedRun:
    """What went: the runs (the run, then its pipeline's tasks) and their job submissions."""

    run_ids: list[str]
    job_submission_ids: list[str]


class RunDeletion(ABC):
    """Deleting a finished run's rows; `Store` provides the engine."""

    _writer: Engine

    def delete_run(self, run_id: str) -> DeletedRun | None:
        """Deletes the run and what it left; None if there is no such run; RunStillActive, and nothing
        deleted, if it or a task of its pipeline is active."""
        with self._writer.begin() as connection:
            runs = connection.execute(
                sa.select(_RUNS.c.id, _RUNS.c.status, _RUNS.c.code_hash).where(
                    sa.or_(_RUNS.c.id == run_id, _RUNS.c.pipeline_id == run_id)
                )
            ).all()
            if not any(row.id == run_id for row in runs):
                return None
            active = [row.id for row in runs if RunStatus(row.status).is_active()]
            if active:
                raise RunStillActive(f"{', '.join(active)} has not finished")
            run_ids = [run_id] + sorted(row.id for row in runs if row.id != run_id)
            jobs = _job_submission_ids(connection, run_ids)
            _delete_rows(connection, run_ids, jobs)
            _delete_unreferenced_code(connection, {row.code_hash for row in runs if row.code_hash})
        return DeletedRun(run_ids, jobs)


def _job_submission_ids(connection: Connection, run_ids: list[str]) -> list[str]:
    rows = connection.execute(sa.select(_JOBS.c.id).where(_JOBS.c.run_id.in_(run_ids)).order_by(_JOBS.c.id))
    return [row.id for row in rows]


def _delete_rows(connection: Connection, run_ids: list[str], jobs: list[str]) -> None:
    if jobs:
        connection.execute(sa.delete(_CHUNKS).where(_CHUNKS.c.job_submission_id.in_(jobs)))
        connection.execute(sa.delete(_DRAINS).where(_DRAINS.c.replica_id.in_(jobs)))
    for table in (_EVENTS, _REPLICAS, _REQUESTS, _QUEUED, _JOBS, _RUN_TOKENS):
        connection.execute(sa.delete(table).where(table.c.run_id.in_(run_ids)))
    connection.execute(sa.delete(_RUNS).where(_RUNS.c.id.in_(run_ids)))


def _delete_unreferenced_code(connection: Connection, hashes: set[str]) -> None:
    if not hashes:
        return
    still_used = sa.select(_RUNS.c.code_hash).where(_RUNS.c.code_hash.in_(hashes))  # never NULL: NOT IN
    connection.execute(sa.delete(_CODE).where(_CODE.c.hash.in_(hashes), _CODE.c.hash.not_in(still_used)))
