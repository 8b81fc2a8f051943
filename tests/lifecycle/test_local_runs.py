"""Runs on the local backend, end to end: real dev server, worker, agent and store."""

from __future__ import annotations

import re
from pathlib import Path

from cli.api import FerryAPI
from core.configuration import (
    NotARun,
    RunConfiguration,
    parse_configuration,
)
from core.jobs.state_machine import replay_job
from core.runs.state_machine import replay_run
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from tests.lifecycle.checks import check_finished_run

SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}


def task(commands: list[str], **fields: object) -> RunConfiguration:
    conf = parse_configuration({"type": "task", "commands": commands, "resources": SMALL, **fields})
    assert not isinstance(conf, NotARun)
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


async def test_node_groups_run_their_own_commands_the_workers_first(ferry: FerryAPI, tmp_path: Path) -> None:
    """A head and two workers (docs/runs.md#node-groups): each group its own commands and addresses; under
    `workers-first` the head starts only once both workers run (docs/runs.md#startup-order)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    worker = f"touch {marks}/worker-$FERRY_NODE_RANK; sleep 3"
    head = f"echo head {{rank=$FERRY_NODE_RANK, worker=${{{{ groups[1].nodes[1].IP_ADDRESS }}}}}}; ls {marks}"
    conf = parse_configuration(
        {
            "type": "task",
            "startup_order": "workers-first",
            "groups": [
                {"name": "head", "commands": [head], "resources": {**SMALL, "cpu": "1.."}},
                {"name": "workers", "nodes": 2, "commands": [worker], "resources": SMALL},
            ],
        }
    )
    assert not isinstance(conf, NotARun)
    final = await ferry.wait((await ferry.submit(conf, repo_dir=tmp_path)).run_name)
    assert final.status == RunStatus.DONE
    assert ferry.logs(final, job=0)[0] == b"head {rank=0, worker=127.0.0.1}\nworker-1\nworker-2\n"
    assert ferry.logs(final, job=2)[0] == b""
    await check_finished_run(ferry, final)


async def test_master_first_workers_start_once_the_master_runs(ferry: FerryAPI, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    command = f'if [ "$FERRY_NODE_RANK" = 0 ]; then touch {marks}/master; sleep 3; else ls {marks}; fi'
    conf = task([command], nodes=3, startup_order="master-first")
    final = await ferry.wait((await ferry.submit(conf, repo_dir=tmp_path)).run_name)
    assert final.status == RunStatus.DONE
    assert [ferry.logs(final, job=n)[0] for n in (1, 2)] == [b"master\n", b"master\n"]
    await check_finished_run(ferry, final)


async def test_repos_and_files_make_the_jobs_code(ferry: FerryAPI, tmp_path: Path) -> None:
    """dstack's `repos: [..]` and `files` (docs/runs.md#code): the parent directory is the code, with a file
    from elsewhere added under the working directory."""
    (tmp_path / "train.py").write_text("print('training')\n")
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "params.yml").write_text("lr: 0.1\n")
    commands = [
        "ls",
        "cat inputs/params.yml",
        'test "$DSTACK_REPO_ID" = "$FERRY_REPO_ID"',
        "echo $FERRY_REPO_ID",
    ]
    conf = task(commands, repos=[".."], files=["params.yml:inputs/params.yml"])
    assert conf.unsupported_fields() == []
    final = await ferry.wait((await ferry.submit(conf, repo_dir=configs)).run_name)
    assert final.status == RunStatus.DONE
    listing, repo = ferry.logs(final)[0].decode().rsplit("lr: 0.1\n", 1)
    assert listing == "configs\ninputs\ntrain.py\n"
    # The code's name: its directory's, and a hash of where it is (activities.code.repo_id).
    assert re.fullmatch(rf"{re.escape(tmp_path.name.replace('_', '-'))}-[0-9a-f]{{8}}\n", repo), repo
