"""Pipelines against the real dev server and agent (docs/pipelines.md): three tasks in turn, the second
failing once and retried within itself, each task's log kept under its number; a worker killed in the
middle of a pipeline, and the pipeline going on from where it was with a new worker."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
from pathlib import Path
from typing import Any

from cli.api import FerryAPI
from cli.pipeline_tasks import task_run
from core.configuration import TaskConfiguration, parse_configuration
from core.configuration.pipeline import PipelineConfiguration
from core.status import RunStatus
from tests.lifecycle.checks import eventually
from tests.lifecycle.conftest import WorkerProcesses

SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}


def task(*commands: str, **fields: Any) -> TaskConfiguration:
    conf = parse_configuration({"type": "task", "commands": list(commands), "resources": SMALL, **fields})
    assert isinstance(conf, TaskConfiguration)
    return conf


async def test_three_tasks_in_turn_the_second_retried(ferry: FerryAPI, tmp_path: Path) -> None:
    marker = shlex.quote(str(tmp_path / "failed-once"))
    pipeline = PipelineConfiguration(
        name="pipe-retry",
        tasks=[
            task("echo one"),
            task(
                f"echo two; test -e {marker} || {{ touch {marker}; exit 1; }}",
                retry={"on_events": ["error"], "duration": "1h"},
            ),
            task("echo three"),
        ],
    )
    record = await ferry.submit_pipeline(pipeline, repo_dir=tmp_path)
    final = await ferry.wait("pipe-retry")
    assert (final.status, final.status_message) == (RunStatus.DONE, "task 3 of 3: all jobs done")
    runs = ferry.store.list_pipeline_tasks(record.id)
    assert [(r.task_num, r.status) for r in runs] == [(1, "done"), (2, "done"), (3, "done")]
    second = task_run(ferry.store, final, 2)
    assert [j.submission_num for j in ferry.store.list_job_submissions(second.id)] == [0, 1]
    assert ferry.logs(task_run(ferry.store, final, 1))[0] == b"one\n"
    assert ferry.logs(task_run(ferry.store, final, 3))[0] == b"three\n"
    names = [e.name for e in ferry.run_events(final)]
    assert names.count("task-start") == 3 and names.count("task-end") == 3 and names[-1] == "clean"
    assert [r.run_name for r in await ferry.list_runs(all_runs=True)].count("pipe-retry") == 1


async def test_worker_killed_mid_pipeline(
    bare_ferry: FerryAPI, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    ferry = bare_ferry
    counter = tmp_path / "ran"
    log = shlex.quote(str(counter))
    pipeline = PipelineConfiguration(
        name="pipe-kill",
        tasks=[task(f"echo 1 >> {log}"), task(f"echo 2 >> {log}", "sleep 4"), task(f"echo 3 >> {log}")],
    )
    first = worker_processes.start(ferry.task_queue)
    record = await ferry.submit_pipeline(pipeline, repo_dir=tmp_path)
    await eventually("task 2 running", lambda: _task_running(ferry, record.id, 2))
    os.kill(first.pid, signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    await asyncio.to_thread(worker_processes.start, ferry.task_queue)
    final = await ferry.wait("pipe-kill")
    assert final.status == RunStatus.DONE
    assert counter.read_text() == "1\n2\n3\n"  # each task once, in turn


async def _task_running(ferry: FerryAPI, pipeline_id: str, task_num: int) -> bool:
    runs = await asyncio.to_thread(ferry.store.list_pipeline_tasks, pipeline_id)
    return any(r.task_num == task_num and r.status == "running" for r in runs)
