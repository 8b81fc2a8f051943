"""An agent killed while it starts a job (the task PREPARING: its code extracted, its process about to be
spawned) and started again on the same data dir: a job whose process had not started is PENDING again and
the client's retried `run` starts it, once; one whose wrapper had started, but not written its pid yet, is
found through /proc and never started a second time (docs/jobs.md#a-restarted-agent)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from agent_harness import AgentProcess, new_id, pull_all, start_agent, stop_agent, wait_terminated

from activities.agent_client import AgentClient
from agent.executors.process import WRAPPER_NAME
from core.status import JobTerminationReason
from core.wire.agent_api import JobSpec, TaskStatus, TaskSubmitRequest


async def submitted(client: AgentClient, marker: Path) -> str:
    """A task with its job spec, not run yet; its commands append a line to `marker`."""
    task_id = new_id("preparing")
    await client.submit_task(TaskSubmitRequest(id=task_id))
    await client.submit_job(task_id, JobSpec(run_name="r", commands=[f"echo ran >> {marker}", "echo hello"]))
    return task_id


def killed_while_preparing(agent: AgentProcess, task_id: str) -> Path:
    """SIGKILL the agent, its task left as `run` saves it before the job's process is spawned; the task's
    directory."""
    agent.kill()
    root = agent.data_dir / "tasks" / task_id
    record = json.loads((root / "task.json").read_text())
    (root / "task.json").write_text(json.dumps({**record, "status": TaskStatus.PREPARING.value}))
    return root


async def test_a_job_not_started_when_its_agent_died_starts_once_when_run_again(workspace: Path) -> None:
    agent = start_agent(workspace / "first")
    marker = workspace / "ran"
    try:
        async with agent.client() as client:
            task_id = await submitted(client, marker)
        killed_while_preparing(agent, task_id)

        agent = start_agent(workspace / "second", data_dir=agent.data_dir)
        async with agent.client() as client:
            assert (await client.get_task(task_id)).status == TaskStatus.PENDING
            info = await client.instance_info()
            assert info.free == info.total  # it asked for nothing, and holds nothing more
            await client.run(task_id)  # what the worker's retried start_job sends
            done = await wait_terminated(client, task_id)
            logs, _ = await pull_all(client, task_id)
        assert (done.termination_reason, done.exit_status, logs) == (
            JobTerminationReason.DONE_BY_RUNNER,
            0,
            b"hello\n",
        )
        assert marker.read_text() == "ran\n"
    finally:
        stop_agent(agent)


async def test_a_wrapper_started_before_its_agent_died_is_followed_not_started_again(workspace: Path) -> None:
    agent = start_agent(workspace / "first")
    marker, flag = workspace / "ran", workspace / "go"
    wrapper: subprocess.Popen[bytes] | None = None
    try:
        async with agent.client() as client:
            task_id = await submitted(client, marker)
        root = killed_while_preparing(agent, task_id)
        # As the agent spawns it (agent/executors/process.py), before it has written wrapper.pid.
        script = f"while [ ! -f {flag} ]; do sleep 0.02; done"
        wrapper = subprocess.Popen(["/bin/sh", "-c", script, WRAPPER_NAME, str(root)], start_new_session=True)

        agent = start_agent(workspace / "second", data_dir=agent.data_dir)
        async with agent.client() as client:
            found = await client.get_task(task_id)
            assert found.status == TaskStatus.RUNNING
            assert (await client.run(task_id)).status == TaskStatus.RUNNING  # no second start
            flag.touch()
            gone = await wait_terminated(client, task_id)
        assert gone.termination_reason == JobTerminationReason.EXECUTOR_ERROR
        assert not marker.exists()  # the job's commands never ran: only the stand-in wrapper did
    finally:
        if wrapper is not None and wrapper.poll() is None:
            wrapper.kill()
        if wrapper is not None:
            wrapper.wait()
        stop_agent(agent)
