"""Stopping jobs: graceful stop with cleanup, abort, escalation to SIGKILL, and max_duration."""

from __future__ import annotations

from agent_harness import pull_all, start_job, wait_for_log

from activities.agent_client import AgentClient
from core.status import JobStatus, JobTerminationReason
from core.wire.agent_api import TaskStatus

TRAPS_TERM = [
    "cleanup() { echo cleaning up; sleep 0.2; echo cleaned up; exit 0; }",
    "trap cleanup TERM",
    "echo ready",
    "while true; do sleep 0.05; done",
]
IGNORES_TERM = ["trap '' TERM", "echo ready", "while true; do sleep 0.05; done"]


async def test_graceful_stop_lets_the_job_clean_up(client: AgentClient) -> None:
    task_id = await start_job(client, TRAPS_TERM)
    await wait_for_log(client, task_id, b"ready\n")
    task = await client.terminate(task_id, JobTerminationReason.TERMINATED_BY_USER, "stop please", timeout=30)
    assert task.status == TaskStatus.RUNNING  # stopping is asynchronous: the job is cleaning up
    logs, states = await pull_all(client, task_id)
    # Between the two, bash may report that the job's `sleep` died of the SIGTERM.
    assert logs.startswith(b"ready\n")
    assert logs.endswith(b"cleaning up\ncleaned up\n")
    assert [state.state for state in states] == [
        JobStatus.RUNNING,
        JobStatus.TERMINATING,
        JobStatus.TERMINATED,
    ]
    final = await client.get_task(task_id)
    assert final.termination_reason == JobTerminationReason.TERMINATED_BY_USER
    assert final.termination_message == "stop please"
    assert final.exit_status == 0


async def test_abort_kills_a_job_that_ignores_sigterm(client: AgentClient) -> None:
    task_id = await start_job(client, IGNORES_TERM)
    await wait_for_log(client, task_id, b"ready\n")
    await client.terminate(task_id, JobTerminationReason.ABORTED_BY_USER, timeout=0)
    logs, states = await pull_all(client, task_id)
    assert logs == b"ready\n"
    assert states[-1].state == JobStatus.ABORTED
    final = await client.get_task(task_id)
    assert final.termination_reason == JobTerminationReason.ABORTED_BY_USER
    assert final.exit_status == 137  # killed by SIGKILL, in the shell's convention


async def test_graceful_stop_escalates_to_sigkill_after_the_timeout(client: AgentClient) -> None:
    task_id = await start_job(client, IGNORES_TERM)
    await wait_for_log(client, task_id, b"ready\n")
    await client.terminate(task_id, timeout=0.5)
    logs, states = await pull_all(client, task_id)
    assert states[-1].state == JobStatus.TERMINATED
    assert states[-1].termination_reason == JobTerminationReason.TERMINATED_BY_USER
    assert states[-1].exit_status == 137


async def test_abort_after_a_graceful_stop_kills_at_once(client: AgentClient) -> None:
    task_id = await start_job(client, IGNORES_TERM)
    await wait_for_log(client, task_id, b"ready\n")
    await client.terminate(task_id, timeout=3600)
    await client.terminate(task_id, JobTerminationReason.ABORTED_BY_USER, timeout=0)
    _, states = await pull_all(client, task_id)
    assert states[-1].termination_reason == JobTerminationReason.ABORTED_BY_USER
    assert [state.state for state in states].count(JobStatus.TERMINATING) == 1


async def test_max_duration_ends_the_job(client: AgentClient) -> None:
    task_id = await start_job(client, ["echo started", "sleep 1000"], max_duration=1)
    logs, states = await pull_all(client, task_id)
    assert logs.startswith(b"started\n")  # bash may then report that its `sleep` was terminated
    assert states[-1].state == JobStatus.TERMINATED
    assert states[-1].termination_reason == JobTerminationReason.MAX_DURATION_EXCEEDED
    assert states[-1].termination_message == "max_duration of 1s exceeded"
    assert states[-1].exit_status == 143  # bash died of the SIGTERM


async def test_terminating_a_terminated_task_changes_nothing(client: AgentClient) -> None:
    task_id = await start_job(client, ["true"])
    _, states = await pull_all(client, task_id)
    task = await client.terminate(task_id, JobTerminationReason.ABORTED_BY_USER, timeout=0)
    assert task.termination_reason == JobTerminationReason.DONE_BY_RUNNER
    assert len((await client.pull(task_id)).job_states) == len(states)
