"""What every lifecycle test checks once its run has finished, and bounded waits on the real thing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from temporalio.worker import Replayer

from cli.api import FerryAPI
from core.jobs.state_machine import replay_job
from core.runs.state_machine import replay_run
from core.wire.workflow_ids import job_workflow_id
from store import RunRecord
from workflows.job import JobWorkflow
from workflows.run import RunWorkflow

WAIT_LIMIT = 30.0  # seconds any one condition may take before the test fails
POLL = 0.05


async def eventually(what: str, ok: Callable[[], Awaitable[bool]], limit: float = WAIT_LIMIT) -> None:
    """Poll `ok` until it holds; fail after `limit` seconds."""
    deadline = time.monotonic() + limit
    while not await ok():
        assert time.monotonic() < deadline, f"waited {limit:.0f}s for {what}"
        await asyncio.sleep(POLL)


async def job_status(ferry: FerryAPI, record: RunRecord, submission: int = 0) -> str | None:
    jobs = await asyncio.to_thread(ferry.store.list_job_submissions, record.id)
    return next((j.status for j in jobs if j.submission_num == submission), None)


async def log_of(ferry: FerryAPI, record: RunRecord) -> bytes:
    return (await asyncio.to_thread(ferry.logs, record))[0]


def _job_handles(ferry: FerryAPI, record: RunRecord) -> list[str]:
    return [
        job_workflow_id(record.workflow_id, j.replica_num, j.job_num, j.submission_num)
        for j in ferry.store.list_job_submissions(record.id)
    ]


async def check_eventlogs(ferry: FerryAPI, record: RunRecord) -> None:
    """The eventlogs in the store are the workflows' own, and replaying them gives the workflows' state."""
    described = await ferry.client.get_workflow_handle(record.workflow_id).query(RunWorkflow.describe)
    stored = ferry.run_events(record)
    assert described.first_seq == 0
    assert described.events == stored
    assert replay_run(stored) == described.state
    assert described.state.status == record.status
    for job in ferry.store.list_job_submissions(record.id):
        workflow_id = job_workflow_id(record.workflow_id, job.replica_num, job.job_num, job.submission_num)
        job_described = await ferry.client.get_workflow_handle(workflow_id).query(JobWorkflow.describe)
        job_stored = ferry.job_events(record, job.id)
        assert job_described.events == job_stored
        state = replay_job(job_stored)
        assert (state.status, state.termination_reason, state.exit_status) == (
            job.status,
            job.termination_reason,
            job.exit_status,
        )


async def check_histories_replay(ferry: FerryAPI, record: RunRecord) -> None:
    """The run's and its jobs' recorded histories replay on today's workflow code: no nondeterminism."""
    # The client's converter: the histories' payloads are sealed (docs/secrets.md).
    replayer = Replayer(workflows=[RunWorkflow, JobWorkflow], data_converter=ferry.client.data_converter)
    for workflow_id in [record.workflow_id, *_job_handles(ferry, record)]:
        history = await ferry.client.get_workflow_handle(workflow_id).fetch_history()
        result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
        assert result.replay_failure is None


async def check_finished_run(ferry: FerryAPI, record: RunRecord) -> None:
    await check_eventlogs(ferry, record)
    await check_histories_replay(ferry, record)
