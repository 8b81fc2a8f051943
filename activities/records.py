"""Store writes for the workflows: a run's new events and status, and its jobs', flushed as they happen.

A run's writes are regular activities, but its last one, since the revision LOCAL_LAST_WRITE, is a local
activity (docs/runs.md#the-store): a regular activity runs only once the server has accepted the task that
scheduled it, so what it writes is what the history holds. A local one runs inside its workflow task, and
when the server refuses that task (a signal arriving as the run completes, or a worker dying before it
reports) the task is redone with new timestamps and possibly other events at the same sequence numbers;
so the last write says its place among the run's writes (`RecordRun.order`), and the store keeps the
events of the latest. Idempotent: a retried flush re-sends its events with the same sequence numbers and
the store ignores the ones it has.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity

from core.eventlog import Event
from core.status import RunStatus
from core.wire import activity_names as names
from core.wire.messages import RecordJob, RecordPipelineTask, RecordRun
from store import JobSubmissionRecord, RunRecord, Store


def _rows(events: list[Event]) -> list[tuple[float, str, dict]]:
    return [(e.timestamp, e.name, e.context) for e in events]


class RecordActivities:
    def __init__(self, store: Store) -> None:
        self._store = store

    @activity.defn(name=names.RECORD_PIPELINE_TASK)
    async def record_pipeline_task(self, request: RecordPipelineTask) -> None:
        """Stored once: a retry finds it there, perhaps already moved on by the task's own run."""
        await asyncio.to_thread(self._record_pipeline_task, request)

    def _record_pipeline_task(self, request: RecordPipelineTask) -> None:
        if self._store.get_run(request.run_id) is None:
            self._store.put_run(pipeline_task_record(request))

    @activity.defn(name=names.RECORD_RUN)
    async def record_run(self, record: RecordRun) -> None:
        """The run's new events and status, and its jobs' news, in one transaction."""
        await asyncio.to_thread(self._record_run, record)

    def _record_run(self, record: RecordRun) -> None:
        store_run_changes(self._store, record)


def store_run_changes(store: Store, record: RecordRun) -> None:
    """A run's new events and status, and its jobs', in one transaction."""
    fields: dict[str, Any] = {
        "status": record.status.value,
        "termination_reason": record.termination_reason.value if record.termination_reason else None,
        "status_message": record.status_message,
        "finished_at": record.finished_at,
    }
    if record.configuration is not None:
        fields["configuration"] = record.configuration
    if record.priority is not None:
        fields["priority"] = record.priority
    store.record_changes(
        record.run_id,
        fields,
        (record.start_seq, _rows(record.events)),
        [(job_submission_record(job), job.start_seq, _rows(job.events)) for job in record.jobs],
        order=record.order,
    )


def pipeline_task_record(request: RecordPipelineTask) -> RunRecord:
    return RunRecord(
        id=request.run_id,
        project=request.project,
        run_name=request.run_name,
        user=request.user,
        type=request.configuration.type,
        status=RunStatus.SUBMITTED.value,
        configuration=request.configuration.model_dump_json(),
        code_hash=request.code_hash,
        submitted_at=request.submitted_at,
        updated_at=request.submitted_at,
        priority=request.configuration.priority,
        workflow_id=request.workflow_id,
        pipeline_id=request.pipeline_id,
        task_num=request.task_num,
    )


def job_submission_record(record: RecordJob) -> JobSubmissionRecord:
    return JobSubmissionRecord(
        id=record.job_submission_id,
        run_id=record.run_id,
        replica_num=record.replica_num,
        job_num=record.job_num,
        submission_num=record.submission_num,
        status=record.status.value,
        termination_reason=record.termination_reason.value if record.termination_reason else None,
        termination_message=record.termination_message,
        exit_status=record.exit_status,
        instance_name=record.instance_name,
        submitted_at=record.submitted_at,
        provisioned_at=record.provisioned_at,
        finished_at=record.finished_at,
        status_message=record.status_message,
    )
