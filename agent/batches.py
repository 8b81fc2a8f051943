"""Many tasks started or removed in one request (docs/jobs.md#batches): an array's elements, placed on
this agent together. Each task goes through the steps its own requests would take (agent/tasks.py,
agent/jobs.py), so a batch sent again is answered as the first was, and each task is answered on its own:
one refused does not hold the others back."""

from __future__ import annotations

import asyncio

from agent import jobs
from agent.code_cache import CodeCache
from agent.tasks import ERROR_STATUSES, TaskRegistry
from core.wire.agent_batches import BatchAnswers, RemoveBatch, StartBatch, TaskAnswer


async def start_tasks(registry: TaskRegistry, code: CodeCache, batch: StartBatch) -> BatchAnswers:
    """Each task submitted, given its job and its kept code, then all started at once."""
    answers: list[TaskAnswer] = []
    for item in batch.tasks:
        task_id = item.submit.id
        try:
            registry.submit(item.submit)
            jobs.submit_job(registry, task_id, item.spec)
            if item.code_hash is not None:
                jobs.take_kept_code(registry, code, task_id, item.code_hash)
        except Exception as exc:
            answers.append(_refused(task_id, exc))
            continue
        answers.append(TaskAnswer(id=task_id))
    starting = [answer for answer in answers if answer.message is None]
    started = await asyncio.gather(
        *(jobs.run(registry, answer.id) for answer in starting), return_exceptions=True
    )
    for index, answer in enumerate(starting):  # (zip's strict= is not Python 3.9's: the hosts' may be)
        outcome = started[index]
        if isinstance(outcome, BaseException):
            refused = _refused(answer.id, outcome)
            answer.status_code, answer.message = refused.status_code, refused.message
        else:
            answer.task = outcome
    return BatchAnswers(answers=answers)


def remove_tasks(registry: TaskRegistry, batch: RemoveBatch) -> BatchAnswers:
    answers = []
    for task_id in batch.ids:
        try:
            answers.append(TaskAnswer(id=task_id, task=registry.remove(task_id)))
        except Exception as exc:
            answers.append(_refused(task_id, exc))
    return BatchAnswers(answers=answers)


def _refused(task_id: str, exc: BaseException) -> TaskAnswer:
    """What the task's own request would have been answered: 404, 409, 400, or 500 for anything else."""
    status = next((code for kind, code in ERROR_STATUSES if isinstance(exc, kind)), 500)
    return TaskAnswer(id=task_id, status_code=status, message=str(exc) or type(exc).__name__)
