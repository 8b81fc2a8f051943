"""Tasks started on their agent in one request (docs/jobs.md#batches): an array's placed elements, or one
job's task. What a batch does not start is left to each task's own steps, which the caller takes."""

from __future__ import annotations

import contextlib
from typing import Protocol

from temporalio import activity

from activities.agent_client import AgentClient
from activities.instances import InstanceDirectory
from core.jobs.transitions import published_ports
from core.wire.agent_api import TaskStatus
from core.wire.agent_batches import StartBatch, TaskStart
from core.wire.messages import PrepareAndStart


class Starter(Protocol):
    """What a batch needs of the job steps (activities/jobs.py JobActivities)."""

    @property
    def instances(self) -> InstanceDirectory: ...

    async def batch_item(self, client: AgentClient, step: PrepareAndStart) -> TaskStart: ...


async def start_together(jobs: Starter, instance: str, steps: list[PrepareAndStart]) -> dict[int, str | None]:
    """The steps (all on `instance`, none with a container: a pull outlasts an answer) in one request: by
    position, the ports published for each task the agent started (None: none). A step refused, or a
    batch not taken (an agent of an earlier release, one unreachable), is missing."""
    started: dict[int, str | None] = {}
    try:
        client = await jobs.instances.resolve(instance)
        if not client.takes_batches:
            return started
        items, sent = [], []
        for index, step in enumerate(steps):
            with contextlib.suppress(Exception):  # taken alone, where it fails as it should
                items.append(await jobs.batch_item(client, step))
                sent.append(index)
        answers = await client.start_batch(StartBatch(tasks=items)) if items else []
        if len(answers) != len(sent):
            raise ValueError(f"{len(answers)} answers to a batch of {len(sent)}")
    except Exception as err:
        activity.logger.info("a start batch on %s was not taken: %s", instance, err)
        return started
    for index, answer in zip(sent, answers, strict=True):
        task = answer.task
        if task is not None and task.status in (TaskStatus.RUNNING, TaskStatus.TERMINATED):
            started[index] = published_ports(task.ports)
    return started
