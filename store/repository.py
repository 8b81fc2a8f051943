"""The Store: short, idempotent transactions over the tables, safe under concurrent writers.

Workers (activities, possibly several processes, possibly a timed-out attempt overlapping its retry)
write; the CLI reads. Every write may therefore be repeated, or run alongside a copy of itself,
without failing or storing anything twice. The methods are synchronous: activities call them from
threads.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine, Table, delete, func, update
from sqlmodel import Session, col, select

from core.status import WAITING_FOR_CAPACITY, JobStatus, RunStatus
from store.backend_repository import BackendRecords
from store.change_repository import ChangeRecords
from store.engine import for_writes
from store.fleet_repository import FleetRecords
from store.models import (
    RUN_EVENTLOG,
    CodeArchiveRecord,
    EventRecord,
    JobSubmissionRecord,
    LogChunkRecord,
    QueuedJobRecord,
    RunRecord,
)
from store.run_deletion import RunDeletion
from store.secret_repository import SecretRecords
from store.service_repository import ServiceRecords
from store.sql import insert_ignore, row_of, upsert, upsert_many
from store.team_repository import TeamRecords
from store.volume_repository import VolumeRecords

_RUNS: Table = RunRecord.__table__  # type: ignore[attr-defined]
_JOBS: Table = JobSubmissionRecord.__table__  # type: ignore[attr-defined]
_EVENTS: Table = EventRecord.__table__  # type: ignore[attr-defined]
_CHUNKS: Table = LogChunkRecord.__table__  # type: ignore[attr-defined]
_CODE: Table = CodeArchiveRecord.__table__  # type: ignore[attr-defined]

_EVENT_KEY = ("run_id", "job_submission_id", "seq")
_IDS_PER_QUERY = 500  # bound parameters per IN list: well under any database's limit
_FINISHED_RUN_STATUSES = sorted(status.value for status in RunStatus.finished_statuses())


class LogGapError(ValueError):
    """A log chunk starts past the end of the stored log: the sender must resend from `size`."""

    def __init__(self, job_submission_id: str, offset: int, size: int) -> None:
        super().__init__(
            f"log of {job_submission_id}: a chunk at offset {offset} would leave a gap "
            f"after the {size} bytes stored"
        )
        self.job_submission_id = job_submission_id
        self.offset = offset
        self.size = size


class RecordNotFoundError(LookupError):
    """An update named a record that is not stored."""


def code_hash(data: bytes) -> str:
    """A code archive's name in the store, "sha256:<hex>": what the CLI sends first (docs/teams.md#runs)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Store(
    FleetRecords,
    ServiceRecords,
    VolumeRecords,
    SecretRecords,
    BackendRecords,
    TeamRecords,
    ChangeRecords,
    RunDeletion,
):
    """The store's API over one engine (see store.opening.open_store); fleets and instances: FleetRecords;
    services and proxies: ServiceRecords; named volumes: VolumeRecords; secrets: SecretRecords;
    backends: BackendRecords; users, projects and members: TeamRecords; who changed what: ChangeRecords;
    forgetting a finished run: RunDeletion."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._writer = for_writes(engine)

    # Runs

    def put_run(self, record: RunRecord) -> None:
        """Inserts the run, or replaces every field of the stored run with the same id."""
        with self._writer.begin() as connection:
            upsert(connection, _RUNS, row_of(_RUNS, record), keep=())

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Sets these fields of a stored run, and updated_at unless given; RecordNotFoundError if none."""
        fields.setdefault("updated_at", time.time())
        self._update(_RUNS, run_id, fields)

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run with this id, if stored."""
        with self._session() as session:
            return session.get(RunRecord, run_id)

    def find_run(self, project: str, run_name: str) -> RunRecord | None:
        """The most recently submitted run of this name in the project."""
        statement = (
            select(RunRecord)
            .where(
                col(RunRecord.project) == project,
                col(RunRecord.run_name) == run_name,
                col(RunRecord.pipeline_id).is_(None),
            )
            .order_by(col(RunRecord.submitted_at).desc())
            .limit(1)
        )
        with self._session() as session:
            return session.exec(statement).first()

    def list_runs(
        self, project: str | None = None, active_only: bool = False, limit: int = 100
    ) -> list[RunRecord]:
        """Runs, newest submitted first: of one project or all, and only unfinished ones if asked."""
        statement = select(RunRecord).where(col(RunRecord.pipeline_id).is_(None))
        if project is not None:
            statement = statement.where(col(RunRecord.project) == project)
        if active_only:
            statement = statement.where(col(RunRecord.status).not_in(_FINISHED_RUN_STATUSES))
        statement = statement.order_by(col(RunRecord.submitted_at).desc(), col(RunRecord.id)).limit(limit)
        with self._session() as session:
            return list(session.exec(statement).all())

    def list_pipeline_tasks(self, pipeline_id: str) -> list[RunRecord]:
        """The runs of a pipeline's tasks started so far, in order (docs/pipelines.md)."""
        statement = (
            select(RunRecord)
            .where(col(RunRecord.pipeline_id) == pipeline_id)
            .order_by(col(RunRecord.task_num))
        )
        with self._session() as session:
            return list(session.exec(statement).all())

    # Job submissions

    def put_job_submission(self, record: JobSubmissionRecord) -> None:
        """Inserts the submission, or replaces the stored one's fields; log_size stays the store's own."""
        with self._writer.begin() as connection:
            _put_job(connection, record)

    def update_job_submission(self, job_submission_id: str, **fields: Any) -> None:
        """Sets these fields of a stored submission (log_size excepted); RecordNotFoundError if none."""
        if "log_size" in fields:
            raise TypeError("log_size follows the stored log: write the log with append_log")
        self._update(_JOBS, job_submission_id, fields)

    def get_job_submission(self, job_submission_id: str) -> JobSubmissionRecord | None:
        """The submission with this id, if stored."""
        with self._session() as session:
            return session.get(JobSubmissionRecord, job_submission_id)

    def list_job_submissions(self, run_id: str) -> list[JobSubmissionRecord]:
        """The run's submissions, by replica, job and submission number."""
        statement = (
            select(JobSubmissionRecord)
            .where(col(JobSubmissionRecord.run_id) == run_id)
            .order_by(
                col(JobSubmissionRecord.replica_num),
                col(JobSubmissionRecord.job_num),
                col(JobSubmissionRecord.submission_num),
            )
        )
        with self._session() as session:
            jobs = list(session.exec(statement).all())
        return self._with_queue(run_id, jobs)

    def _with_queue(self, run_id: str, jobs: list[JobSubmissionRecord]) -> list[JobSubmissionRecord]:
        """The run's jobs that a fleet holds in its queue wait for capacity, those its run has not recorded
        yet too: the fleet records its queue itself (`put_queue`), and a job's own record says nothing of
        it (docs/fleets.md#the-queue-in-the-store)."""
        queued = {row.job_submission_id: row for row in self.queued_jobs(run_id)}
        if not queued:
            return jobs
        for job in jobs:
            if job.id in queued and job.status == JobStatus.SUBMITTED and job.status_message is None:
                job.status_message = _waiting(queued[job.id])
        recorded = {job.id for job in jobs}
        unrecorded = [row for job_id, row in queued.items() if job_id not in recorded]
        if not unrecorded:
            return jobs
        run = self.get_run(run_id)
        submitted_at = run.submitted_at if run is not None else time.time()
        jobs += [
            JobSubmissionRecord(
                id=row.job_submission_id,
                run_id=run_id,
                replica_num=row.replica_num,
                job_num=row.job_num,
                submission_num=row.submission_num,
                status=JobStatus.SUBMITTED,
                submitted_at=submitted_at,
                status_message=_waiting(row),
            )
            for row in unrecorded
        ]
        return sorted(jobs, key=lambda job: (job.replica_num, job.job_num, job.submission_num))

    # Eventlogs

    def append_events(
        self,
        run_id: str,
        job_submission_id: str | None,
        start_seq: int,
        events: Sequence[EventRow],
    ) -> None:
        """Stores (timestamp, name, context) events as seq start_seq, start_seq+1, ... of the eventlog.

        job_submission_id None names the run's own eventlog. An event whose seq is stored already
        is skipped (the first write wins), so a retried call may resend any of them.
        """
        rows = _event_rows(run_id, job_submission_id, start_seq, events)
        if not rows:
            return
        with self._writer.begin() as connection:
            insert_ignore(connection, _EVENTS, rows, _EVENT_KEY)

    def record_changes(
        self,
        run_id: str,
        run_fields: dict[str, Any],
        run_events: tuple[int, Sequence[EventRow]],
        jobs: Sequence[tuple[JobSubmissionRecord, int, Sequence[EventRow]]] = (),
        order: int | None = None,
    ) -> None:
        """A run's news in one transaction: its new events from seq run_events[0] and these fields, and
        each job submission's record and new events (the same submission may come more than once: the
        last copy wins). Idempotent, as append_events and put_job_submission are.

        `order`: the write's place among its run workflow's writes, for one made from a workflow task
        (docs/runs.md#the-store). A task the server refused is redone, later in the history, and may
        have other run events from the same seq on: a write of a higher order than the stored one
        replaces the run's events from its first seq on, one of a lower order (the refused task's,
        arriving late) changes nothing, and one of the same order (its retry) is idempotent."""
        rows = _event_rows(run_id, None, *run_events)
        for record, start_seq, events in jobs:
            rows += _event_rows(run_id, record.id, start_seq, events)
        run_fields.setdefault("updated_at", time.time())
        with self._writer.begin() as connection:
            if order is not None:
                if not _takes_write(connection, run_id, order, run_events[0]):
                    return
                run_fields["write_order"] = order
            if rows:
                insert_ignore(connection, _EVENTS, rows, _EVENT_KEY)
            _put_jobs(connection, [record for record, _, _ in jobs])
            _update_row(connection, _RUNS, run_id, run_fields)

    def read_events(
        self, run_id: str, job_submission_id: str | None, after_seq: int = -1
    ) -> list[EventRecord]:
        """One eventlog's events with seq > after_seq, in order (None: the run's own eventlog)."""
        statement = (
            select(EventRecord)
            .where(
                col(EventRecord.run_id) == run_id,
                col(EventRecord.job_submission_id) == (job_submission_id or RUN_EVENTLOG),
                col(EventRecord.seq) > after_seq,
            )
            .order_by(col(EventRecord.seq))
        )
        with self._session() as session:
            return list(session.exec(statement).all())

    def read_all_events(self, run_id: str) -> list[EventRecord]:
        """The run's events and all its submissions', by timestamp then seq."""
        statement = (
            select(EventRecord)
            .where(col(EventRecord.run_id) == run_id)
            .order_by(col(EventRecord.timestamp), col(EventRecord.seq), col(EventRecord.job_submission_id))
        )
        with self._session() as session:
            return list(session.exec(statement).all())

    # Logs

    def append_log(self, job_submission_id: str, offset: int, data: bytes, timestamp: float) -> int:
        """Stores `data` as the log's bytes from `offset` on, and returns the log's new size.

        Bytes below the stored size are stored already and are skipped, so a resent or overlapping
        chunk is harmless; a chunk starting past the stored size raises LogGapError (resend from its
        `size`). Raises the submission record's log_size, if the record exists.
        """
        if offset < 0:
            raise ValueError(f"negative log offset {offset}")
        with self._writer.begin() as connection:
            _lock_log(connection, job_submission_id)
            size = _stored_log_size(connection, job_submission_id)
            if offset > size:
                raise LogGapError(job_submission_id, offset, size)
            new = data[size - offset :]
            if not new:
                return size
            connection.execute(
                sa.insert(_CHUNKS).values(
                    job_submission_id=job_submission_id, offset=size, data=new, timestamp=timestamp
                )
            )
            size += len(new)
            connection.execute(
                update(_JOBS)
                .where(_JOBS.c.id == job_submission_id, _JOBS.c.log_size < size)
                .values(log_size=size)
            )
            return size

    def read_log(
        self, job_submission_id: str, offset: int = 0, limit: int | None = None
    ) -> tuple[bytes, int]:
        """Up to `limit` bytes of the log from `offset` (all, if None), and the offset that follows them."""
        if offset < 0 or (limit is not None and limit < 0):
            raise ValueError(f"bad log range: offset {offset}, limit {limit}")
        chunks = _CHUNKS.c
        mine = chunks.job_submission_id == job_submission_id
        # Both statements in one transaction, so they see one snapshot of the log.
        with self.engine.connect() as connection:
            # The chunk holding `offset` starts at the greatest chunk offset not after it.
            start = connection.execute(
                sa.select(func.max(chunks.offset)).where(mine, chunks.offset <= offset)
            ).scalar()
            if start is None:
                return b"", offset
            statement = sa.select(chunks.data).where(mine, chunks.offset >= start).order_by(chunks.offset)
            if limit is not None:
                statement = statement.where(chunks.offset < offset + limit)
            joined = b"".join(connection.execute(statement).scalars())
        data = joined[offset - start :] if limit is None else joined[offset - start : offset - start + limit]
        return data, offset + len(data)

    def log_offset_since(self, job_submission_id: str, since: float) -> int | None:
        """The offset of the first log chunk stored at or after `since` (None: none was)."""
        chunks = _CHUNKS.c
        statement = sa.select(func.min(chunks.offset)).where(
            chunks.job_submission_id == job_submission_id, chunks.timestamp >= since
        )
        with self.engine.connect() as connection:
            found = connection.execute(statement).scalar()
        return None if found is None else int(found)

    def log_size(self, job_submission_id: str) -> int:
        """How many bytes of the submission's log are stored."""
        with self.engine.connect() as connection:
            return _stored_log_size(connection, job_submission_id)

    # Code archives

    def put_code(self, data: bytes) -> str:
        """Stores a code archive once, whoever sends it how often, and returns its hash "sha256:<hex>"."""
        digest = code_hash(data)
        # The archive is usually stored already (a rerun, a retried activity): skip the write lock.
        if self.has_code(digest):
            return digest
        row = {"hash": digest, "data": data, "size": len(data), "created_at": time.time()}
        with self._writer.begin() as connection:
            insert_ignore(connection, _CODE, [row], ("hash",))
        return digest

    def has_code(self, code_hash: str) -> bool:
        with self.engine.connect() as connection:
            return (
                connection.execute(sa.select(_CODE.c.hash).where(_CODE.c.hash == code_hash)).first()
                is not None
            )

    def get_code(self, code_hash: str) -> bytes | None:
        """The code archive with this hash, if stored."""
        with self.engine.connect() as connection:
            data: bytes | None = connection.execute(
                sa.select(_CODE.c.data).where(_CODE.c.hash == code_hash)
            ).scalar()
        return data

    # Helpers

    @contextmanager
    def _session(self) -> Iterator[Session]:
        # Read-only: the session's transaction is rolled back on close; the records it returns
        # stay loaded (nothing is expired, as nothing is committed).
        with Session(self.engine) as session:
            yield session

    def _upsert_row(self, table: Table, row: dict[str, Any], connection: Connection | None = None) -> None:
        if connection is not None:
            upsert(connection, table, row, keep=())
            return
        with self._writer.begin() as connection:
            upsert(connection, table, row, keep=())

    def _update(self, table: Table, record_id: str, fields: dict[str, Any]) -> None:
        updatable = {column.name for column in table.columns if not column.primary_key}
        unknown = set(fields) - updatable
        if unknown:
            raise TypeError(f"not updatable in {table.name}: {', '.join(sorted(unknown))}")
        if not fields:
            return
        with self._writer.begin() as connection:
            _update_row(connection, table, record_id, fields)


EventRow = tuple[float, str, Mapping[str, Any]]  # (timestamp, name, context)


def _event_rows(
    run_id: str, job_submission_id: str | None, start_seq: int, events: Sequence[EventRow]
) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run_id,
            "job_submission_id": job_submission_id or RUN_EVENTLOG,
            "seq": start_seq + index,
            "timestamp": timestamp,
            "name": name,
            "context": json.dumps(dict(context), separators=(",", ":")),
        }
        for index, (timestamp, name, context) in enumerate(events)
    ]


def _takes_write(connection: Connection, run_id: str, order: int, start_seq: int) -> bool:
    """Whether a run's write of `order` goes on (Store.record_changes); a later one's run events from
    `start_seq` on are deleted first, to be written again."""
    query = select(_RUNS.c.write_order).where(_RUNS.c.id == run_id)
    if connection.dialect.name == "postgresql":
        query = query.with_for_update()  # two workers' writes for one run: one after the other
    stored = connection.execute(query).scalar()
    if stored is not None and order < stored:
        return False
    if stored is None or order > stored:
        connection.execute(
            delete(_EVENTS).where(
                _EVENTS.c.run_id == run_id,
                _EVENTS.c.job_submission_id == RUN_EVENTLOG,
                _EVENTS.c.seq >= start_seq,
            )
        )
    return True


def _update_row(connection: Connection, table: Table, record_id: str, fields: dict[str, Any]) -> None:
    result = connection.execute(update(table).where(table.c.id == record_id).values(**fields))
    if result.rowcount == 0:
        raise RecordNotFoundError(f"no {table.name} record {record_id!r}")


def _put_job(connection: Connection, record: JobSubmissionRecord) -> None:
    _lock_log(connection, record.id)
    row = row_of(_JOBS, record)
    # A record written after some of its log (or a stale copy of one) must not reset log_size.
    row["log_size"] = _stored_log_size(connection, record.id)
    upsert(connection, _JOBS, row, keep=("log_size",))


def _put_jobs(connection: Connection, records: list[JobSubmissionRecord]) -> None:
    """`_put_job` of each (the last copy of a submission wins), their log sizes read in one query."""
    latest = {record.id: record for record in records}
    if len(latest) <= 1:
        for record in latest.values():
            _put_job(connection, record)
        return
    ids = sorted(latest)  # the same order for every writer: their advisory locks cannot deadlock
    for job_id in ids:
        _lock_log(connection, job_id)
    sizes = _stored_log_sizes(connection, ids)
    rows = []
    for job_id in ids:
        row = row_of(_JOBS, latest[job_id])
        row["log_size"] = sizes.get(job_id, 0)
        rows.append(row)
    upsert_many(connection, _JOBS, rows, keep=("log_size",))


def _stored_log_sizes(connection: Connection, job_submission_ids: list[str]) -> dict[str, int]:
    """`_stored_log_size` of each submission that has a log (a log's chunks are contiguous from 0, so its
    size is where its furthest chunk ends)."""
    sizes: dict[str, int] = {}
    for start in range(0, len(job_submission_ids), _IDS_PER_QUERY):
        some = job_submission_ids[start : start + _IDS_PER_QUERY]
        found = connection.execute(
            sa.select(_CHUNKS.c.job_submission_id, func.max(_CHUNKS.c.offset + func.length(_CHUNKS.c.data)))
            .where(_CHUNKS.c.job_submission_id.in_(some))
            .group_by(_CHUNKS.c.job_submission_id)
        )
        sizes.update((job_id, int(size)) for job_id, size in found)
    return sizes


def _lock_log(connection: Connection, job_submission_id: str) -> None:
    """Serialises writers of one log. SQLite needs nothing: write transactions begin IMMEDIATE."""
    if connection.dialect.name == "postgresql":
        connection.execute(sa.select(func.pg_advisory_xact_lock(func.hashtext(job_submission_id))))


def _stored_log_size(connection: Connection, job_submission_id: str) -> int:
    last = connection.execute(
        sa.select(_CHUNKS.c.offset, func.length(_CHUNKS.c.data))
        .where(_CHUNKS.c.job_submission_id == job_submission_id)
        .order_by(_CHUNKS.c.offset.desc())
        .limit(1)
    ).first()
    return 0 if last is None else int(last[0]) + int(last[1])


def _waiting(row: QueuedJobRecord) -> str:
    """`waiting for capacity`, with what for where the fleet knows (a Slurm allocation's pending reason)."""
    return WAITING_FOR_CAPACITY if not row.reason else f"{WAITING_FOR_CAPACITY}: {row.reason}"
