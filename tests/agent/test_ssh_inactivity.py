"""A dev environment's `inactivity_duration` (docs/attach.md), kept by its agent (agent/task_watch.py): a job
nobody is connected to ends INACTIVITY_DURATION_EXCEEDED once the duration has passed since its start or
its last SSH connection closed; one with an SSH connection open stays up."""

from __future__ import annotations

import asyncio
import subprocess

from agent_harness import wait_terminated
from ssh_harness import SSH_TIMEOUT, Jobs
from test_ssh_server import connections_are

from activities.agent_client import AgentClient
from core.status import JobTerminationReason
from core.wire.agent_api import TaskStatus

INACTIVE = JobTerminationReason.INACTIVITY_DURATION_EXCEEDED


async def test_a_job_nobody_attaches_to_ends_inactive(jobs: Jobs, client: AgentClient) -> None:
    target = await jobs.start(["sleep 600"], inactivity_duration=1, stop_duration=1)
    ended = await wait_terminated(client, target.task_id)
    assert ended.termination_reason == INACTIVE
    assert ended.termination_message == "no SSH connection for 1s (inactivity_duration)"


async def test_an_attached_job_stays_up_and_ends_after_its_last_connection(
    jobs: Jobs, client: AgentClient
) -> None:
    target = await jobs.start(["sleep 600"], inactivity_duration=2, stop_duration=1)
    session = subprocess.Popen(target.ssh_argv(jobs.key, "-N"), stdin=subprocess.DEVNULL)
    try:
        await connections_are(client, target.task_id, 1)
        await asyncio.sleep(3)  # past the duration, attached all along
        assert (await client.get_task(target.task_id)).status == TaskStatus.RUNNING
    finally:
        session.terminate()
        session.wait(SSH_TIMEOUT)
    closed = await connections_are(client, target.task_id, 0)
    ended = await wait_terminated(client, target.task_id)
    assert ended.termination_reason == INACTIVE
    assert ended.finished_at is not None and closed.ssh_last_activity is not None
    assert ended.finished_at >= closed.ssh_last_activity + 2  # counted from the last connection's close
