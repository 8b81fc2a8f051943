"""Retries, stops and a worker crash on the local backend: real dev server, worker, agent and store."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
from pathlib import Path

from cli.api import FerryAPI
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from store import RunRecord
from tests.lifecycle.checks import check_finished_run, eventually, job_status, log_of
from tests.lifecycle.conftest import WorkerProcesses
from tests.lifecycle.test_local_runs import task

RUN_LIMIT = 60.0  # seconds a run of these tests may take, its 15 s retry backoff included


async def finished(ferry: FerryAPI, record: RunRecord) -> RunRecord:
    return await asyncio.wait_for(ferry.wait(record.run_name), RUN_LIMIT)


def code_dir(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    return repo


async def test_retried_run_ends_done(ferry: FerryAPI, tmp_path: Path) -> None:
    """docs/runs.md STEP 2-3: the command fails the first time; the run goes PENDING, is resubmitted after
    the 15 s backoff on a durable timer, and its second submission ends DONE."""
    marker = shlex.quote(str(tmp_path / "failed-once"))  # outside the code dir, which each job gets anew
    command = f"if [ -e {marker} ]; then echo second try; else touch {marker}; echo first try; exit 1; fi"
    conf = task([command], retry={"on_events": ["error"], "duration": "1h"})
    final = await finished(ferry, await ferry.submit(conf, repo_dir=code_dir(tmp_path)))
    assert (final.status, final.termination_reason) == (RunStatus.DONE, RunTerminationReason.ALL_JOBS_DONE)
    jobs = sorted(ferry.store.list_job_submissions(final.id), key=lambda j: j.submission_num)
    assert [(j.submission_num, j.status, j.exit_status) for j in jobs] == [
        (0, JobStatus.FAILED, 1),
        (1, JobStatus.DONE, 0),
    ]
    assert ferry.store.read_log(jobs[0].id)[0] == b"first try\n"
    assert ferry.logs(final)[0] == b"second try\n"
    events = ferry.run_events(final)
    [retry] = [e for e in events if e.name == "retry"]
    assert retry.context == {"replicas": [0], "attempt": 0, "backoff": 15}
    [pending] = [e for e in events if e.name == "status" and e.context["status"] == RunStatus.PENDING]
    assert retry.timestamp - pending.timestamp >= 15
    await check_finished_run(ferry, final)


async def test_stop_lets_the_job_handle_sigterm(ferry: FerryAPI, tmp_path: Path) -> None:
    """docs/runs.md STEP 4-5 (`ferry stop`): the job gets SIGTERM and its grace period; what it prints on
    the way out is in the stored log; the job ends TERMINATED (TERMINATED_BY_USER), the run TERMINATED."""
    commands = ["trap 'echo caught SIGTERM; exit 0' TERM", "echo started", "sleep 1000 & wait"]
    record = await ferry.submit(task(commands), repo_dir=code_dir(tmp_path))
    await eventually("the job to print", lambda: _printed(ferry, record, b"started\n"))
    reply = await ferry.stop(record.run_name)
    assert reply.status in (RunStatus.RUNNING, RunStatus.TERMINATING)
    final = await finished(ferry, record)
    assert (final.status, final.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.STOPPED_BY_USER,
    )
    [job] = ferry.store.list_job_submissions(final.id)
    assert (job.status, job.termination_reason) == (
        JobStatus.TERMINATED,
        JobTerminationReason.TERMINATED_BY_USER,
    )
    assert ferry.logs(final)[0] == b"started\ncaught SIGTERM\n"
    await check_finished_run(ferry, final)


async def test_abort_kills_at_once(ferry: FerryAPI, tmp_path: Path) -> None:
    """docs/runs.md STEP 4-5 (`ferry stop -x`): a job that ignores SIGTERM is killed with no grace period
    (it has 300 s of it on a graceful stop); the job ends ABORTED, the run TERMINATED."""
    commands = ["trap '' TERM", "echo started", "sleep 1000"]
    record = await ferry.submit(task(commands), repo_dir=code_dir(tmp_path))
    await eventually("the job to print", lambda: _printed(ferry, record, b"started\n"))
    await ferry.stop(record.run_name, abort=True)
    final = await finished(ferry, record)
    assert (final.status, final.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.ABORTED_BY_USER,
    )
    [job] = ferry.store.list_job_submissions(final.id)
    assert (job.status, job.termination_reason) == (JobStatus.ABORTED, JobTerminationReason.ABORTED_BY_USER)
    await check_finished_run(ferry, final)


async def test_worker_killed_mid_run(
    bare_ferry: FerryAPI, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    """The worker dies (SIGKILL) while the job runs; a new worker takes over the run's and job's
    workflows, the job keeps running on its agent, and the run ends DONE with its command run once."""
    ferry = bare_ferry
    counter = tmp_path / "ran"
    commands = [f"echo ran >> {shlex.quote(str(counter))}", "echo started", "sleep 3", "echo finished"]
    first = worker_processes.start(ferry.task_queue)
    record = await ferry.submit(task(commands), repo_dir=code_dir(tmp_path))
    await eventually("the job to run", lambda: _printed(ferry, record, b"started\n"))
    # The store hears of the job's start through its run, a moment after the job's first output.
    await eventually("the job RUNNING in the store", lambda: _status_is(ferry, record, JobStatus.RUNNING))
    os.kill(first.pid, signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    await asyncio.to_thread(worker_processes.start, ferry.task_queue)
    final = await finished(ferry, record)
    assert (final.status, final.termination_reason) == (RunStatus.DONE, RunTerminationReason.ALL_JOBS_DONE)
    assert counter.read_text() == "ran\n"
    [job] = ferry.store.list_job_submissions(final.id)
    assert (job.submission_num, job.status, job.exit_status) == (0, JobStatus.DONE, 0)
    assert ferry.logs(final)[0] == b"started\nfinished\n"
    await check_finished_run(ferry, final)


async def _status_is(ferry: FerryAPI, record: RunRecord, status: JobStatus) -> bool:
    return await job_status(ferry, record) == status


async def _printed(ferry: FerryAPI, record: RunRecord, text: bytes) -> bool:
    return text in await log_of(ferry, record)
