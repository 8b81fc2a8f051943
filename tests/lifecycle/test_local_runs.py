"""Runs on the local backend, end to end: real dev server, worker, agent and store."""

from __future__ import annotations

from pathlib import Path

from cli.api import FerryAPI
from core.configuration import (
    FleetConfiguration,
    RunConfiguration,
    VolumeConfiguration,
    parse_configuration,
)
from core.jobs.state_machine import replay_job
from core.runs.state_machine import replay_run
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from tests.lifecycle.checks import check_finished_run

SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}


def task(commands: list[str], **fields: object) -> RunConfiguration:
    conf = parse_configuration({"type": "task", "commands": commands, "resources": SMALL, **fields})
    assert not isinstance(conf, FleetConfiguration | VolumeConfiguration)
    return conf


async def test_task_ends_done_with_its_logs_in_the_store(ferry: FerryAPI, tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("from the repo\n")
    record = await ferry.submit(task(["echo hello from ferry", "cat data.txt"]), repo_dir=tmp_path)
    final = await ferry.wait(record.run_name)
    assert final.status == RunStatus.DONE
    assert final.termination_reason == RunTerminationReason.ALL_JOBS_DONE
    log, _ = ferry.logs(final)
    assert log == b"hello from ferry\nfrom the repo\n"
    jobs = ferry.store.list_job_submissions(final.id)
    assert [(j.status, j.termination_reason, j.exit_status) for j in jobs] == [
        (JobStatus.DONE, JobTerminationReason.DONE_BY_RUNNER, 0)
    ]
    # The stored eventlogs replay to the states the workflows ended in.
    assert replay_run(ferry.run_events(final)).status == RunStatus.DONE
    assert replay_job(ferry.job_events(final, jobs[0].id)).status == JobStatus.DONE
    await check_finished_run(ferry, final)


async def test_failing_command_ends_failed_with_exit_status(ferry: FerryAPI, tmp_path: Path) -> None:
    record = await ferry.submit(task(["echo before", "exit 3", "echo never"]), repo_dir=tmp_path)
    final = await ferry.wait(record.run_name)
    assert (final.status, final.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    [job] = ferry.store.list_job_submissions(final.id)
    assert (job.status, job.exit_status) == (JobStatus.FAILED, 3)
    assert ferry.logs(final)[0] == b"before\n"
    await check_finished_run(ferry, final)


async def test_two_node_task_prints_each_rank(ferry: FerryAPI, tmp_path: Path) -> None:
    conf = task(["echo rank=$FERRY_NODE_RANK of $FERRY_NODES_NUM master=$DSTACK_MASTER_NODE_IP"], nodes=2)
    final = await ferry.wait((await ferry.submit(conf, repo_dir=tmp_path)).run_name)
    assert final.status == RunStatus.DONE
    assert ferry.logs(final, job=0)[0] == b"rank=0 of 2 master=127.0.0.1\n"
    assert ferry.logs(final, job=1)[0] == b"rank=1 of 2 master=127.0.0.1\n"
    await check_finished_run(ferry, final)
