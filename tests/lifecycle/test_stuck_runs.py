"""A run whose workflow cannot go on says so (docs/upgrades.md#stuck-runs): a worker of a release that
changed RunWorkflow without a patch takes over a running run, whose replay then fails; Temporal flags
the workflow, `ferry ps` shows the run `stuck` with the error and since when. Back on the right code, the
run goes on and ends as it would have, its job run once; a new configuration meanwhile is refused at once,
saying why. A stuck run can still be stopped: from outside (docs/upgrades.md#stopping-a-stuck-run), its
task stopped gracefully and removed, its capacity back, its end stored as a stop would have stored it."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cli import render
from cli.api import FerryAPI
from cli.errors import RunStuck
from cli.stuck import StuckWorkflow, stuck_runs, stuck_workflows
from core.jobs.state_machine import replay_job
from core.runs.state_machine import replay_run
from core.runs.stuck_stop import STUCK_EXCEPTION
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from embedded.local_agent import local_agent_client
from store import RunRecord
from tests.lifecycle.checks import check_finished_run, eventually, job_status, log_of
from tests.lifecycle.conftest import WorkerProcesses
from tests.lifecycle.test_local_runs import task

STUCK_LIMIT = 60.0  # Temporal retries a failed workflow task after about 10 s; the second failure flags it


async def test_a_run_a_broken_release_cannot_replay_is_stuck_then_goes_on_with_the_right_code(
    bare_ferry: FerryAPI, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    ferry = bare_ferry
    counter = tmp_path / "ran"
    release = tmp_path / "release"
    commands = [
        f"echo ran >> {shlex.quote(str(counter))}",
        "echo started",
        f"while [ ! -e {shlex.quote(str(release))} ]; do sleep 0.2; done",
        "echo finished",
    ]
    record, broken = await _running_under_a_broken_release(ferry, worker_processes, commands, tmp_path)
    started = time.time()
    release.touch()  # the job ends: its news is the run's next workflow task, which the new code fails

    stuck = await _until_stuck(ferry, record)
    assert stuck.workflow_id == record.workflow_id
    assert "ondeterminism" in stuck.reason, stuck.reason
    assert stuck.since is not None and started - 5 <= stuck.since <= time.time()
    refused = f"run {record.run_name} cannot take a new configuration: its workflow .* stuck since"
    with pytest.raises(RunStuck, match=refused):
        await ferry.deploy(record.run_name, task(commands))  # an update it could not take would wait for ever
    listed = ferry.store.get_run(record.id)
    assert listed is not None and listed.status == RunStatus.RUNNING  # the store cannot tell
    jobs = ferry.store.list_job_submissions(record.id)
    table = render.runs_table([(listed, jobs)], stuck={record.id: stuck})
    [row] = [r for r in table.rows if r.cells[0] == record.run_name]
    assert row.cells[3] == "stuck" and row.cells[4] == stuck.message()
    [shown] = render.runs_json([(listed, [])], stuck={record.id: stuck})
    assert shown["stuck"]["workflow_id"] == record.workflow_id and shown["status"] == RunStatus.RUNNING

    os.kill(broken.pid, signal.SIGTERM)
    broken.wait(15)
    await asyncio.to_thread(worker_processes.start, ferry.task_queue)
    final = await asyncio.wait_for(ferry.wait(record.run_name), STUCK_LIMIT)
    assert (final.status, final.termination_reason) == (RunStatus.DONE, RunTerminationReason.ALL_JOBS_DONE)
    assert counter.read_text() == "ran\n"
    assert ferry.logs(final)[0] == b"started\nfinished\n"
    assert record.workflow_id not in stuck_runs(await stuck_workflows(ferry.client))
    await check_finished_run(ferry, final)


async def test_a_stuck_run_is_stopped_from_outside_its_task_removed_and_its_capacity_back(
    bare_ferry: FerryAPI, worker_processes: WorkerProcesses, ferry_home: Path, tmp_path: Path
) -> None:
    ferry = bare_ferry
    commands = ["trap 'echo got TERM; exit 0' TERM", "echo started", "sleep 1000 & wait"]
    record, _ = await _running_under_a_broken_release(ferry, worker_processes, commands, tmp_path)
    await ferry.fleets().set_priority(record.run_name, 7)  # a signal: the run's next workflow task fails
    stuck = await _until_stuck(ferry, record)

    reply = await asyncio.wait_for(ferry.stop(record.run_name), STUCK_LIMIT)
    assert (reply.status, reply.stuck) == (RunStatus.TERMINATED, stuck.message())
    final = await asyncio.to_thread(ferry.store.get_run, record.id)
    assert final is not None
    assert (final.status, final.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.STOPPED_BY_USER,
    )
    [job] = ferry.store.list_job_submissions(record.id)
    assert (job.status, job.termination_reason) == (
        JobStatus.TERMINATED,
        JobTerminationReason.TERMINATED_BY_USER,
    )
    assert ferry.logs(final)[0] == b"started\ngot TERM\n"  # stopped with its grace period, its log whole
    # The stored logs replay to the stored end, and the run's says why it was ended from outside.
    run_state = replay_run(ferry.run_events(final))
    assert run_state.status == RunStatus.TERMINATED
    assert [e.note for e in run_state.exceptions if e.type == STUCK_EXCEPTION] == [stuck.message()]
    assert replay_job(ferry.job_events(final, job.id)).status == JobStatus.TERMINATED

    open_query = f"WorkflowId STARTS_WITH '{record.workflow_id}' AND ExecutionStatus = 'Running'"
    await eventually("no open workflow of the run", lambda: _none_listed(ferry, open_query))
    agent = local_agent_client(ferry_home, timeout=10)
    tasks = [t.id for t in await agent.list_tasks()]
    await agent.aclose()
    assert not [t for t in tasks if t.startswith(record.id)]
    await eventually("its capacity back in the fleet", lambda: _fleet_jobs(ferry, 0))
    assert record.workflow_id not in stuck_runs(await stuck_workflows(ferry.client))
    again = await ferry.stop(record.run_name)  # finished: nothing more to do
    assert (again.status, again.stuck) == (RunStatus.TERMINATED, None)


async def _running_under_a_broken_release(
    ferry: FerryAPI, worker_processes: WorkerProcesses, commands: list[str], tmp_path: Path
) -> tuple[RunRecord, subprocess.Popen[str]]:
    """A run started by a good worker, its job printing `started`, then left to a broken release's worker."""
    repo = tmp_path / "repo"
    repo.mkdir()
    good = worker_processes.start(ferry.task_queue)
    record = await ferry.submit(task(commands), repo_dir=repo)
    await eventually("the job to run", lambda: _printed(ferry, record, b"started\n"))
    await eventually("the job RUNNING in the store", lambda: _job_running(ferry, record))
    os.kill(good.pid, signal.SIGTERM)
    assert good.wait(15) == 0, worker_processes.stderr_of(good)  # its stderr, when it did not end well
    return record, await asyncio.to_thread(worker_processes.start, ferry.task_queue, broken_release=True)


async def _none_listed(ferry: FerryAPI, query: str) -> bool:
    return not [e async for e in ferry.client.list_workflows(query)]


async def _fleet_jobs(ferry: FerryAPI, count: int) -> bool:
    instances = await asyncio.to_thread(ferry.store.list_instances, ferry.project)
    return bool(instances) and sum(i.jobs for i in instances) == count


async def _until_stuck(ferry: FerryAPI, record: RunRecord) -> StuckWorkflow:
    found: dict[str, StuckWorkflow] = {}

    async def flagged() -> bool:
        found.update(stuck_runs(await stuck_workflows(ferry.client)))
        return record.workflow_id in found

    await eventually("Temporal to flag the run's workflow", flagged, limit=STUCK_LIMIT)
    return found[record.workflow_id]


async def _job_running(ferry: FerryAPI, record: RunRecord) -> bool:
    return await job_status(ferry, record) == JobStatus.RUNNING


async def _printed(ferry: FerryAPI, record: RunRecord, text: bytes) -> bool:
    return text in await log_of(ferry, record)
