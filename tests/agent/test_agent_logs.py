"""Logs by offset over HTTP and live over WebSocket: whole, in order, never twice."""

from __future__ import annotations

import hashlib
import subprocess

import pytest
from agent_harness import AgentProcess, new_id, pull_all, start_job, wait_for_log, wait_terminated

from activities.agent_client import AgentClient, AgentError
from core.status import JobStatus
from core.wire.agent_api import MAX_PULL_LIMIT, TaskSubmitRequest


async def test_pull_by_offset_returns_each_byte_once(client: AgentClient) -> None:
    task_id = await start_job(client, ["for i in $(seq 1 200); do echo line-$i; done"])
    await wait_terminated(client, task_id)
    whole = (await client.pull(task_id)).log_bytes()
    assert whole == b"".join(f"line-{i}\n".encode() for i in range(1, 201))
    pieces, offset = [], 0
    while True:
        reply = await client.pull(task_id, offset=offset, limit=97)
        assert reply.offset == offset
        if not reply.log_bytes():
            assert not reply.has_more
            break
        assert len(reply.log_bytes()) <= 97
        pieces.append(reply.log_bytes())
        offset = reply.next_offset
    assert b"".join(pieces) == whole
    tail = await client.pull(task_id, offset=len(whole) - 8)
    assert tail.log_bytes() == b"line-200\n"[-8:]
    assert tail.next_offset == len(whole)
    with pytest.raises(AgentError) as error:
        await client.pull(task_id, offset=len(whole) + 1)
    assert error.value.status_code == 400


async def test_job_states_by_offset(client: AgentClient) -> None:
    task_id = await start_job(client, ["true"])
    await wait_terminated(client, task_id)
    first = await client.pull(task_id)
    assert [s.state for s in first.job_states] == [JobStatus.RUNNING, JobStatus.DONE]
    assert first.job_states[0].timestamp <= first.job_states[1].timestamp
    assert first.next_states_offset == 2
    again = await client.pull(task_id, states_offset=first.next_states_offset)
    assert again.job_states == []
    assert again.next_states_offset == 2
    with pytest.raises(AgentError) as error:
        await client.pull(task_id, states_offset=3)
    assert error.value.status_code == 400


async def test_pull_of_a_task_that_never_ran(client: AgentClient) -> None:
    task_id = new_id()
    await client.submit_task(TaskSubmitRequest(id=task_id))
    reply = await client.pull(task_id)
    assert reply.log_bytes() == b""
    assert reply.job_states == []
    assert not reply.finished


async def test_websocket_streams_live_output_from_an_offset(
    shared_agent: AgentProcess, client: AgentClient
) -> None:
    task_id = await start_job(
        client,
        [
            "echo first",
            "while [ ! -f release ]; do sleep 0.02; done",
            "for i in 1 2 3; do echo tick-$i; done",
        ],
    )
    await wait_for_log(client, task_id, b"first\n")
    received = bytearray()
    async for chunk in client.stream_logs(task_id, offset=0):
        received += chunk
        if received == b"first\n":
            # The job waits for this file, so what follows can only arrive live, over the open stream.
            (shared_agent.data_dir / "tasks" / task_id / "workdir" / "release").touch()
    assert bytes(received) == b"first\ntick-1\ntick-2\ntick-3\n"
    tail = b"".join([chunk async for chunk in client.stream_logs(task_id, offset=6)])
    assert tail == b"tick-1\ntick-2\ntick-3\n"
    assert (await client.get_task(task_id)).exit_status == 0


async def test_a_hundred_megabytes_arrive_whole_and_in_order(client: AgentClient) -> None:
    # Numbered lines, so that a lost, doubled or reordered byte shows; about 101 MB in all.
    count = 12_500_000
    expected = subprocess.run(["seq", "1", str(count)], capture_output=True, check=True).stdout
    assert len(expected) > 100 * 10**6
    task_id = await start_job(client, [f"seq 1 {count}"])
    logs, states = await pull_all(client, task_id, timeout=120, limit=MAX_PULL_LIMIT)
    assert states[-1].exit_status == 0
    assert len(logs) == len(expected)
    if logs != expected:
        first_difference = next(i for i, (a, b) in enumerate(zip(logs, expected, strict=True)) if a != b)
        pytest.fail(f"log differs from offset {first_difference}")
    assert hashlib.sha256(logs).digest() == hashlib.sha256(expected).digest()
