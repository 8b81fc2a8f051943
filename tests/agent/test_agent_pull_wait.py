"""A pull that waits (`wait` > 0): held while the job is quiet, answered as soon as it has news."""

from __future__ import annotations

import asyncio
import time

import pytest
from agent_harness import new_id, start_job, wait_terminated

from activities.agent_client import AgentClient, AgentError
from core.status import JobStatus
from core.wire.agent_api import TaskSubmitRequest


async def test_a_quiet_job_holds_the_pull_until_wait_has_passed(client: AgentClient) -> None:
    task_id = await start_job(client, ["sleep 30"])
    first = await client.pull(task_id)
    started = time.monotonic()
    reply = await client.pull(task_id, states_offset=first.next_states_offset, wait=0.6)
    assert time.monotonic() - started >= 0.55
    assert reply.job_states == [] and reply.log_bytes() == b"" and not reply.finished
    await client.terminate(task_id, timeout=0)
    await wait_terminated(client, task_id)


async def test_new_log_bytes_and_the_end_answer_a_waiting_pull_at_once(client: AgentClient) -> None:
    task_id = await start_job(client, ["sleep 0.3", "echo hello", "sleep 0.3"])
    first = await client.pull(task_id)
    assert [s.state for s in first.job_states] == [JobStatus.RUNNING]
    started = time.monotonic()
    reply = await client.pull(task_id, states_offset=1, wait=20)
    assert reply.log_bytes() == b"hello\n"
    assert time.monotonic() - started < 5
    started = time.monotonic()
    end = await client.pull(task_id, offset=reply.next_offset, states_offset=1, wait=20)
    assert end.finished and [s.state for s in end.job_states] == [JobStatus.DONE]
    assert time.monotonic() - started < 5


async def test_a_stop_answers_a_waiting_pull_and_bad_offsets_fail_at_once(client: AgentClient) -> None:
    task_id = await start_job(client, ["sleep 30"])
    waiting = asyncio.ensure_future(client.pull(task_id, states_offset=1, wait=20))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await client.terminate(task_id, timeout=5)
    reply = await asyncio.wait_for(waiting, 5)
    assert [s.state for s in reply.job_states][0] == JobStatus.TERMINATING
    await wait_terminated(client, task_id)
    started = time.monotonic()
    with pytest.raises(AgentError) as error:
        await client.pull(task_id, states_offset=99, wait=20)
    assert error.value.status_code == 400
    assert time.monotonic() - started < 5


async def test_removing_the_task_ends_a_waiting_pull(client: AgentClient) -> None:
    task_id = new_id()
    await client.submit_task(TaskSubmitRequest(id=task_id))
    waiting = asyncio.ensure_future(client.pull(task_id, wait=20))
    await asyncio.sleep(0.2)
    await client.terminate(task_id, timeout=0)
    reply = await asyncio.wait_for(waiting, 5)
    assert reply.finished
    await client.remove(task_id)
