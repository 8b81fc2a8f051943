"""The change feed (`GET /api/changes`, docs/jobs.md#the-instance-watch): every task's news through one
request that waits, as the worker's instance watch asks for it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from agent_harness import new_id, start_agent, start_job, stop_agent, wait_terminated

from activities.agent_client import AgentClient
from core.status import JobTerminationReason
from core.wire.agent_api import ChangesResponse, TaskChange, TaskStatus

OWNER = "ferry/main/run/r0/j0/s0"


def mine(changes: ChangesResponse, task_id: str) -> TaskChange | None:
    return next((change for change in changes.tasks if change.id == task_id), None)


async def until_changed(
    client: AgentClient, cursor: int, epoch: str, task_id: str, status: TaskStatus | None = None
) -> ChangesResponse:
    """The feed's answers from `cursor` until one names the task (other tests' tasks may come first),
    in `status` when given: a stop asked for is news of its own, before the task has ended."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        changes = await client.changes(cursor, epoch, wait=5)
        change = mine(changes, task_id)
        if change is not None and status in (None, change.status) or task_id in changes.removed:
            return changes
        cursor = changes.cursor
    raise TimeoutError(f"no change of {task_id} within 20 s")


async def test_a_task_is_listed_with_its_owner_then_its_log_and_end_answer_a_waiting_request(
    client: AgentClient,
) -> None:
    task_id = await start_job(client, ["sleep 0.5", "echo hello", "sleep 0.5"], task_fields={"owner": OWNER})
    listing = await client.changes(0, "")
    first = mine(listing, task_id)
    assert first is not None and first.owner == OWNER and first.status == TaskStatus.RUNNING
    grown = await until_changed(client, listing.cursor, listing.epoch, task_id)
    change = mine(grown, task_id)
    assert grown.epoch == listing.epoch and grown.cursor > listing.cursor
    assert change is not None and change.log_size == len(b"hello\n")
    ended = await until_changed(client, grown.cursor, grown.epoch, task_id)
    end = mine(ended, task_id)
    assert end is not None and end.status == TaskStatus.TERMINATED
    assert (end.termination_reason, end.exit_status) == (JobTerminationReason.DONE_BY_RUNNER, 0)
    assert end.log_size == len(b"hello\n")
    await client.remove(task_id)
    removed = await until_changed(client, ended.cursor, ended.epoch, task_id)
    assert task_id in removed.removed and mine(removed, task_id) is None


async def test_a_quiet_feed_holds_the_request_and_another_epoch_gets_every_task(
    client: AgentClient,
) -> None:
    task_id = await start_job(client, ["sleep 30"], task_fields={"owner": OWNER})
    listing = await client.changes(0, "")
    await asyncio.sleep(0.3)  # its first look at the (empty) log is behind it
    caught_up = await client.changes(listing.cursor, listing.epoch)
    started = time.monotonic()
    quiet = await client.changes(caught_up.cursor, caught_up.epoch, wait=0.6)
    assert time.monotonic() - started >= 0.55
    assert mine(quiet, task_id) is None
    other = await client.changes(quiet.cursor, "an-earlier-agent")
    assert mine(other, task_id) is not None and other.epoch == listing.epoch
    await client.terminate(task_id, timeout=0)
    stopped = await until_changed(client, quiet.cursor, quiet.epoch, task_id, TaskStatus.TERMINATED)
    change = mine(stopped, task_id)
    assert change is not None and change.termination_reason == JobTerminationReason.TERMINATED_BY_USER
    await wait_terminated(client, task_id)
    await client.remove(task_id)


async def test_a_restarted_agent_has_a_new_epoch_and_lists_the_task_it_took_back(workspace: Path) -> None:
    agent = start_agent(workspace / "first")
    task_id = new_id()
    try:
        async with agent.client() as client:
            await start_job(
                client, ["echo before", "sleep 30"], task_id=task_id, task_fields={"owner": OWNER}
            )
            before = await client.changes(0, "")
        agent.kill()
        agent = start_agent(workspace / "second", data_dir=agent.data_dir)
        async with agent.client() as client:
            after = await client.changes(before.cursor, before.epoch, wait=5)
            change = mine(after, task_id)
            assert after.epoch != before.epoch
            assert change is not None and change.status == TaskStatus.RUNNING and change.owner == OWNER
            assert change.log_size == len(b"before\n")
    finally:
        stop_agent(agent)
