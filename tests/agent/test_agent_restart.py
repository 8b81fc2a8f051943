"""An agent killed with SIGKILL and restarted on the same data dir: every task's outcome, nothing twice."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_harness import (
    AgentProcess,
    new_id,
    pull_all,
    start_agent,
    start_job,
    stop_agent,
    wait_for_log,
    wait_terminated,
)
from temporalio.testing import ActivityEnvironment

from activities.agent_client import AgentClient, AgentUnreachable
from activities.instances import InstanceDirectory
from activities.jobs import JobActivities
from core.status import JobStatus, JobTerminationReason
from core.wire.agent_api import JobSpec, Resources, TaskStatus, TaskSubmitRequest
from core.wire.messages import TaskRef


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def wrapper_pid(agent: AgentProcess, task_id: str) -> int:
    return int(json.loads((agent.data_dir / "tasks" / task_id / "task.json").read_text())["pid"])


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def waits_for(flag: Path, then: list[str]) -> list[str]:
    return ["echo started", f"while [ ! -f {flag} ]; do sleep 0.02; done", *then]


async def test_restarted_agent_reports_every_task(workspace: Path) -> None:
    agent = start_agent(workspace / "first")
    data_dir = agent.data_dir
    ids = {name: new_id(name) for name in ("done", "live", "ends-while-down", "gone", "stops-after")}
    try:
        async with agent.client() as client:
            await start_job(client, ["echo finished before"], task_id=ids["done"])
            _, done_states = await pull_all(client, ids["done"])
            await start_job(
                client,
                waits_for(workspace / "go-live", ["echo after restart", "exit 3"]),
                task_id=ids["live"],
                resources=Resources(cpu=1),
            )
            await start_job(
                client,
                waits_for(workspace / "go-down", ["echo ended while down"]),
                task_id=ids["ends-while-down"],
            )
            await start_job(client, ["echo started", "sleep 1000"], task_id=ids["gone"])
            await start_job(
                client,
                ["trap 'echo got TERM; exit 0' TERM", "echo started", "while true; do sleep 0.02; done"],
                task_id=ids["stops-after"],
            )
            for name in ("live", "ends-while-down", "gone", "stops-after"):
                await wait_for_log(client, ids[name], b"started\n")
        pids = {
            name: wrapper_pid(agent, ids[name]) for name in ("live", "ends-while-down", "gone", "stops-after")
        }

        agent.kill()
        # The jobs outlive their agent; meanwhile one finishes and one is killed behind its back.
        assert all(alive(pid) for pid in pids.values())
        (workspace / "go-down").touch()
        wait_until(lambda: (data_dir / "tasks" / ids["ends-while-down"] / "exit_status").exists())
        os.killpg(pids["gone"], signal.SIGKILL)
        wait_until(lambda: not alive(pids["gone"]))

        agent = start_agent(workspace / "second", data_dir=data_dir)
        async with agent.client() as client:
            done = await client.get_task(ids["done"])
            assert done.termination_reason == JobTerminationReason.DONE_BY_RUNNER
            logs, states = await pull_all(client, ids["done"])
            assert logs == b"finished before\n"
            assert states == done_states

            ended = await wait_terminated(client, ids["ends-while-down"])
            assert ended.termination_reason == JobTerminationReason.DONE_BY_RUNNER
            assert ended.exit_status == 0
            logs, states = await pull_all(client, ids["ends-while-down"])
            assert logs == b"started\nended while down\n"
            assert [state.state for state in states] == [JobStatus.RUNNING, JobStatus.DONE]

            gone = await wait_terminated(client, ids["gone"])
            assert gone.termination_reason == JobTerminationReason.EXECUTOR_ERROR
            assert (
                gone.termination_message
                == "agent restarted and the job's process is gone: it left no exit status"
            )
            assert gone.exit_status is None

            live = await client.get_task(ids["live"])
            assert live.status == TaskStatus.RUNNING
            info = await client.instance_info()
            assert info.free.cpu == info.total.cpu - 1  # its resources are still held

            # A reattached job is still stopped through its process group.
            await client.terminate(ids["stops-after"], timeout=30)
            stopped = await wait_terminated(client, ids["stops-after"])
            assert stopped.termination_reason == JobTerminationReason.TERMINATED_BY_USER
            assert stopped.exit_status == 0
            logs, _ = await pull_all(client, ids["stops-after"])
            assert logs.startswith(b"started\n")
            assert logs.endswith(b"got TERM\n")

            (workspace / "go-live").touch()
            finished = await wait_terminated(client, ids["live"])
            assert finished.termination_reason == JobTerminationReason.CONTAINER_EXITED_WITH_ERROR
            assert finished.exit_status == 3
            logs, states = await pull_all(client, ids["live"])
            assert logs == b"started\nafter restart\n"
            assert [state.state for state in states] == [JobStatus.RUNNING, JobStatus.FAILED]
            assert (await client.instance_info()).free.cpu == info.total.cpu
            await assert_reports_the_same_after_another_restart(agent, workspace, client)
    finally:
        stop_agent(agent)


async def assert_reports_the_same_after_another_restart(
    agent: AgentProcess, workspace: Path, client: AgentClient
) -> None:
    before = {task.id: task for task in await client.list_tasks()}
    agent.kill()
    again = start_agent(workspace / "third", data_dir=agent.data_dir)
    try:
        async with again.client() as restarted:
            after = {task.id: task for task in await restarted.list_tasks()}
    finally:
        again.kill()
    assert after == before


async def test_a_restarted_agent_removes_what_a_cut_short_removal_or_submission_left(workspace: Path) -> None:
    """An agent killed between a removal's first and last write (or a submission's) leaves a task's
    directory without its record: the next agent on the data dir removes it (the chaos suite found one)."""
    agent = start_agent(workspace / "first")
    tasks = agent.data_dir / "tasks"
    kept, removed = new_id("kept"), new_id("removed")
    try:
        async with agent.client() as client:
            for task_id in (kept, removed):
                await start_job(client, ["echo done"], task_id=task_id)
                await pull_all(client, task_id)
        agent.kill()
        (tasks / removed / "task.json").unlink()  # what remove() does first
        (tasks / new_id("submitted")).mkdir()  # what a submission does before its record
        agent = start_agent(workspace / "second", data_dir=agent.data_dir)
        async with agent.client() as client:
            assert [task.id for task in await client.list_tasks()] == [kept]
        assert sorted(path.name for path in tasks.iterdir()) == [kept]
    finally:
        stop_agent(agent)


async def test_a_task_removed_while_its_agent_restarts_is_removed_once_it_is_back(workspace: Path) -> None:
    """The job's removal (`release_task`) fails while the agent is down, so that its retry policy tries
    again, rather than being skipped and leaving the task for good (the upgrade test found one)."""
    agent = start_agent(workspace / "first")
    task_id = new_id("removed")
    ref = TaskRef(job_submission_id=task_id, instance_name="local")
    try:
        async with agent.client() as client:
            await start_job(client, ["echo done"], task_id=task_id)
            await pull_all(client, task_id)
        agent.kill()
        instances = InstanceDirectory()
        async with agent.client() as down:
            instances.add("local", down)
            release = JobActivities(instances, store=None).release_task  # type: ignore[arg-type]
            with pytest.raises(AgentUnreachable):
                await ActivityEnvironment().run(release, ref)
        agent = start_agent(workspace / "second", data_dir=agent.data_dir)
        async with agent.client() as client:
            instances.add("local", client)  # the worker's own client follows its agent (agent_client.py)
            await ActivityEnvironment().run(release, ref)
            assert await client.list_tasks() == []
    finally:
        stop_agent(agent)


async def test_an_agent_killed_between_a_tasks_job_spec_and_its_start_starts_it_once_back(
    workspace: Path,
) -> None:
    """The job spec and the code are written without the record (agent/jobs.py): an agent restarted before
    the start finds the spec by its file, has no hash for the code, and takes the code again."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        member = tarfile.TarInfo("hello.txt")
        member.size = 6
        tar.addfile(member, io.BytesIO(b"hello\n"))
    archive = buffer.getvalue()
    agent = start_agent(workspace / "first")
    task_id = new_id("spec")
    try:
        async with agent.client() as client:
            await client.submit_task(TaskSubmitRequest(id=task_id, resources=Resources()))
            await client.upload_code(task_id, archive)
            spec = JobSpec(run_name="test-run", commands=["cat hello.txt"])
            assert (await client.submit_job(task_id, spec)).job_submitted
        agent.kill()
        agent = start_agent(workspace / "second", data_dir=agent.data_dir)
        async with agent.client() as client:
            task = await client.get_task(task_id)
            assert task.status == TaskStatus.PENDING and task.job_submitted and task.code_hash is None
            await client.upload_code(task_id, archive)  # as the worker's retried start does
            await client.run(task_id)
            ended = await wait_terminated(client, task_id)
            assert ended.exit_status == 0
            logs, _ = await pull_all(client, task_id)
            assert logs == b"hello\n"
    finally:
        stop_agent(agent)
