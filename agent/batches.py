"""Many tasks started or removed in one request (docs/jobs.md#batches): an array's elements, placed on
this agent together. Each task goes through the steps its own requests would take (agent/tasks.py,
agent/jobs.py), so a batch sent again is answered as the first was, and each task is answered on its own:
one refused does not hold the others back."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from agent import jobs
from agent.code_cache import CodeCache
from agent.records import TaskRecord, save_job_spec, save_record
from agent.tasks import ERROR_STATUSES, BadTaskRequest, TaskRegistry
from core.wire.agent_api import TaskInfo, TaskStatus
from core.wire.agent_batches import BatchAnswers, RemoveBatch, StartBatch, TaskAnswer, TaskStart


async def start_tasks(registry: TaskRegistry, code: CodeCache, batch: StartBatch) -> BatchAnswers:
    """Each new task's record and job spec written together (their syncs in threads side by side, which
    the file system commits as one), then every task started at once. A task the agent has already (a
    batch sent again) goes through its own requests' steps, each of which answers it as it is."""
    answers = [TaskAnswer(id=item.submit.id) for item in batch.tasks]
    new: list[tuple[int, TaskRecord, TaskStart]] = []
    known: list[int] = []
    for index, item in enumerate(batch.tasks):
        try:
            if registry.find(item.submit.id) is None:
                new.append((index, registry.new_record(item.submit), item))
                continue
            registry.submit(item.submit)
            jobs.submit_job(registry, item.submit.id, item.spec)
            if item.code_hash is not None:
                jobs.take_kept_code(registry, code, item.submit.id, item.code_hash)
            known.append(index)
        except Exception as exc:
            answers[index] = _refused(item.submit.id, exc)
    written = await asyncio.gather(
        *(asyncio.to_thread(_write_new, registry, code, record, item) for _, record, item in new),
        return_exceptions=True,
    )
    starts: list[tuple[int, Awaitable[TaskInfo]]] = []
    for position, (index, record, _) in enumerate(new):  # (zip's strict= is not Python 3.9's)
        failure = written[position]
        if isinstance(failure, BaseException):
            registry.abandon(record)
            answers[index] = _refused(record.id, failure)
        else:
            registry.admit(record)
            starts.append((index, jobs.start_prepared(registry, record)))
    starts += [(index, jobs.run(registry, answers[index].id)) for index in known]
    outcomes = await asyncio.gather(*(start for _, start in starts), return_exceptions=True)
    for position, (index, _) in enumerate(starts):
        outcome = outcomes[position]
        if isinstance(outcome, BaseException):
            answers[index] = _refused(answers[index].id, outcome)
        else:
            answers[index].task = outcome
    return BatchAnswers(answers=answers)


def _write_new(registry: TaskRegistry, code: CodeCache, record: TaskRecord, item: TaskStart) -> None:
    """In a thread: a new task's directory, job spec, code (a link to the kept archive) and record, written
    PREPARING, as `submit`, `job`, `code` and `run` would have left it."""
    paths = registry.paths(record.id)
    paths.root.mkdir(parents=True, mode=0o700, exist_ok=True)
    save_job_spec(paths, item.spec)
    record.job_submitted = True
    if item.code_hash is not None:
        if not code.link_into(item.code_hash, paths.code_archive):
            raise BadTaskRequest(f"code {item.code_hash} is not kept on this agent")
        record.code_hash = item.code_hash
    record.status = TaskStatus.PREPARING
    save_record(paths, record)


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
