"""`ferry ps`'s message for a PULLING job: how far its image pull is (docs/containers.md#pulls).

The agent counts the pull's layers and bytes; the job's START_JOB step puts that line in its heartbeats
(activities/jobs.py), and the server keeps the latest in the workflow's pending activity, where the Temporal
Web UI shows it too. Reading it is a describe, which adds nothing to the workflow's history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.status import JobStatus
from core.wire.activity_names import START_JOB
from core.wire.workflow_ids import job_workflow_id

if TYPE_CHECKING:
    from temporalio.client import Client

    from store import JobSubmissionRecord, RunRecord

Runs = Sequence[tuple["RunRecord", Sequence["JobSubmissionRecord"]]]
DESCRIBE_TIMEOUT = 5.0


def pulling_jobs(runs: Runs) -> list[tuple[RunRecord, JobSubmissionRecord]]:
    return [(run, job) for run, jobs in runs for job in jobs if job.status == JobStatus.PULLING]


async def pull_lines(client: Client, jobs: Sequence[tuple[RunRecord, JobSubmissionRecord]]) -> dict[str, str]:
    """By job id: the pull line its START_JOB step last sent; a job without one is left out."""
    from temporalio.service import RPCError

    async def line_of(run: RunRecord, job: JobSubmissionRecord) -> str | None:
        workflow = job_workflow_id(run.workflow_id, job.replica_num, job.job_num, job.submission_num)
        try:
            described = await asyncio.wait_for(
                client.get_workflow_handle(workflow).describe(), DESCRIBE_TIMEOUT
            )
        except (TimeoutError, RPCError):
            return None
        for pending in described.raw_description.pending_activities:
            if pending.activity_type.name == START_JOB and pending.heartbeat_details.payloads:
                details = await client.data_converter.decode(pending.heartbeat_details.payloads)
                if details and isinstance(details[0], str):
                    return details[0]
        return None

    lines = await asyncio.gather(*(line_of(run, job) for run, job in jobs))
    return {job.id: line for (_, job), line in zip(jobs, lines, strict=True) if line is not None}
