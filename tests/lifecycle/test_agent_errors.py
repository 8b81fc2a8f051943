"""An agent that refuses a step of a job's start fails the job with its message after a few attempts, and
the run follows its `retry` rules; nothing waits for ever (docs/jobs.md#agent-errors)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path

import sqlalchemy as sa

from activities.code import pack_repo
from cli.api import FerryAPI
from cli.render import final_line
from core.configuration import FleetConfiguration, RunConfiguration, parse_configuration
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from store import JobSubmissionRecord, RunRecord
from store.models import CodeArchiveRecord
from tests.lifecycle.checks import check_finished_run, eventually, job_status

SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}
# Generous: the run ends as soon as its job has failed; this only keeps a broken build from hanging.
WAIT_LIMIT = 180.0


def task(**fields: object) -> RunConfiguration:
    conf = parse_configuration({"type": "task", "commands": ["echo never"], "resources": SMALL, **fields})
    assert isinstance(conf, RunConfiguration) and not isinstance(conf, FleetConfiguration)
    return conf


async def finished(ferry: FerryAPI, record: RunRecord) -> RunRecord:
    return await asyncio.wait_for(ferry.wait(record.run_name), WAIT_LIMIT)


def refused_keys(ferry: FerryAPI) -> FerryAPI:
    """The API with a user key that is no key: the agent refuses the task (400) when it is submitted."""
    return FerryAPI(
        ferry.client,
        ferry.store,
        project=ferry.project,
        task_queue=ferry.task_queue,
        authorized_keys=["ssh-ed25519 not-a-key"],
    )


def check_refused(job: JobSubmissionRecord) -> None:
    assert (job.status, job.termination_reason) == (JobStatus.FAILED, JobTerminationReason.EXECUTOR_ERROR)
    assert job.termination_message is not None
    assert job.termination_message.startswith(
        "the agent on local refused the task: not an OpenSSH public key line"
    ), job.termination_message
    assert "\n" not in job.termination_message


async def test_a_task_the_agent_refuses_fails_with_its_message(ferry: FerryAPI, tmp_path: Path) -> None:
    refused = refused_keys(ferry)
    final = await finished(refused, await refused.submit(task(), repo_dir=tmp_path))
    assert (final.status, final.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    [job] = ferry.store.list_job_submissions(final.id)
    check_refused(job)
    assert final_line(final, [job]).startswith(
        f"run {final.run_name}: failed (job failed): executor error: the agent on local refused the task: "
    )
    await check_finished_run(ferry, final)


async def test_a_refused_task_is_retried_by_the_runs_rules(ferry: FerryAPI, tmp_path: Path) -> None:
    refused = refused_keys(ferry)
    record = await refused.submit(task(retry={"on_events": ["error"]}), repo_dir=tmp_path)
    # `error` is a retry event: the failed job is submitted again (after the pending backoff).

    async def resubmitted() -> bool:
        return await job_status(ferry, record, submission=1) is not None

    await eventually("a second submission", resubmitted, limit=WAIT_LIMIT)
    await refused.stop(record.run_name, abort=True)
    final = await finished(ferry, record)
    first = ferry.store.list_job_submissions(final.id)[0]
    check_refused(first)
    await check_finished_run(ferry, final)


async def test_code_the_agent_refuses_fails_the_job_with_its_message(ferry: FerryAPI, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hello')\n")
    # The store holds other bytes under the code's hash: the agent checks the upload against the hash.
    digest = "sha256:" + hashlib.sha256(pack_repo(tmp_path)).hexdigest()
    garbage = b"not the archive"
    with ferry.store.engine.begin() as connection:
        row = {"hash": digest, "data": garbage, "size": len(garbage), "created_at": time.time()}
        connection.execute(sa.insert(CodeArchiveRecord.__table__).values(**row))  # type: ignore[attr-defined]
    final = await finished(ferry, await ferry.submit(task(), repo_dir=tmp_path))
    assert (final.status, final.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    [job] = ferry.store.list_job_submissions(final.id)
    assert (job.status, job.termination_reason) == (JobStatus.FAILED, JobTerminationReason.EXECUTOR_ERROR)
    actual = hashlib.sha256(garbage).hexdigest()
    assert job.termination_message == (
        "the agent on local refused the job's code: code archive sha256 mismatch: "
        f"expected {digest.removeprefix('sha256:')}, got {actual}"
    )
    await check_finished_run(ferry, final)
