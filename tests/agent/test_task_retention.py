"""An ended task that nobody removes (its worker never came back) is removed by the agent TASK_RETENTION
after it ended, at the agent's start (agent/retention.py, docs/jobs.md#ended-tasks); a newer one is kept."""

from __future__ import annotations

import json
import time
from pathlib import Path

from agent_harness import new_id, start_agent, start_job, stop_agent, wait_terminated

from agent.retention import TASK_RETENTION


async def test_a_task_that_ended_long_ago_is_removed_at_the_agents_start(tmp_path: Path) -> None:
    agent = start_agent(tmp_path / "first")
    old, recent = new_id("old"), new_id("recent")
    try:
        async with agent.client() as client:
            for task_id in (old, recent):
                await start_job(client, ["echo done"], task_id=task_id)
                await wait_terminated(client, task_id)
    finally:
        stop_agent(agent)
    record = agent.data_dir / "tasks" / old / "task.json"
    ended_long_ago = {**json.loads(record.read_text()), "finished_at": time.time() - TASK_RETENTION - 60}
    record.write_text(json.dumps(ended_long_ago))

    again = start_agent(tmp_path / "again", data_dir=agent.data_dir)
    try:
        async with again.client() as client:
            assert [task.id for task in await client.list_tasks()] == [recent]
    finally:
        stop_agent(again)
    assert not (agent.data_dir / "tasks" / old).exists()
    assert (agent.data_dir / "tasks" / recent / "output.log").read_bytes() == b"done\n"
