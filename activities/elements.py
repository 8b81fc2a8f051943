"""An array's elements' agent steps, many in one activity (workflows/elements.py, docs/runs.md#arrays).

Each element's step is the one a JobWorkflow runs on its own (activities/jobs.py), retried here per element
as the job's retry policy would, so that one element's failure is that element's alone: the activity
answers for each, and fails only when the worker is lost (then Temporal runs it again, and each step skips
what it had done).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.agent_client import HTTP_NOT_FOUND
from activities.batch_starts import start_together
from activities.jobs import AGENT_ERROR_ATTEMPTS, JobActivities, remove_task
from core.wire import activity_names as names
from core.wire.element_messages import (
    RemovedTasks,
    RemoveMany,
    StartedTask,
    StartedTasks,
    StartMany,
    StepFailure,
    StopMany,
)
from core.wire.messages import PrepareAndStart, TaskRef

T = TypeVar("T")

# Side by side on the agents: enough to keep them busy, few enough that a batch does not flood one.
_AT_ONCE = 16
# A transient failure (an agent restarting, a worker's connection) is tried again for this long, as the
# job's QUICK policy would until its stop; an agent's refusal AGENT_ERROR_ATTEMPTS times.
_TRANSIENT_FOR = 120.0
_FIRST_PAUSE, _LONGEST_PAUSE = 0.2, 2.0
# A removal as the REMOVE policy tries it: about half a minute.
_REMOVE_ATTEMPTS = 8
_WAITING_FOR_CAPACITY = "WaitingForCapacity"
_BATCH = 256  # tasks in one batch request: a body of a few hundred kB


class ElementActivities:
    def __init__(self, jobs: JobActivities) -> None:
        self._jobs = jobs

    @activity.defn(name=names.START_MANY)
    async def start_many(self, request: StartMany) -> StartedTasks:
        """Each element's PREPARE_AND_START; how each went. The elements of each instance go first in
        batches (one request to its agent for them all, docs/jobs.md#batches); any that a batch did not
        start (refused, still pulling, an agent of an earlier release) are taken one by one, retried."""
        started: dict[int, StartedTask] = {}
        # A container's pull outlasts a batch's answer: it starts alone.
        instances = [s.prepare.instance_name if s.prepare.container is None else None for s in request.steps]
        batches = _batches(instances)
        for some in await asyncio.gather(*(self._start_batch(i, at, request.steps) for i, at in batches)):
            started.update(some)
        rest = [i for i in range(len(request.steps)) if i not in started]
        alone = await _bounded([self._start(request.steps[i]) for i in rest])
        started.update(zip(rest, alone, strict=True))
        return StartedTasks(results=[started[i] for i in range(len(request.steps))])

    async def _start_batch(
        self, instance: str, indices: list[int], steps: list[PrepareAndStart]
    ) -> dict[int, StartedTask]:
        """The steps at `indices` in one request to their agent: those it started, by index."""
        batch = [steps[i] for i in indices]
        started = await start_together(self._jobs, instance, batch)
        return {
            indices[at]: StartedTask(job_submission_id=batch[at].prepare.job_submission_id, published=ports)
            for at, ports in started.items()
        }

    async def _start(self, step: PrepareAndStart) -> StartedTask:
        job_id = step.prepare.job_submission_id
        try:
            published = await _retried(lambda: self._jobs.prepare_and_start(step))
        except Exception as err:  # the last attempt's failure is the element's
            return StartedTask(job_submission_id=job_id, failure=_failure(err))
        return StartedTask(job_submission_id=job_id, published=published)

    @activity.defn(name=names.STOP_MANY)
    async def stop_many(self, request: StopMany) -> None:
        """SIGTERM each, SIGKILL after its grace period; an agent gone is the watch's to tell."""

        async def stop(index: int) -> None:
            try:
                await _retried(lambda: self._jobs.stop_task(request.stops[index]), transient_for=10.0)
            except Exception as err:
                activity.logger.info("could not stop %s: %s", request.stops[index].job_submission_id, err)

        await _bounded([stop(i) for i in range(len(request.stops))])

    @activity.defn(name=names.REMOVE_MANY)
    async def remove_many(self, request: RemoveMany) -> RemovedTasks:
        """Each ended task removed from its agent, its capacity free; why not, for one that could not be.
        Each instance's in batches first; those a batch did not remove (still running, an agent of an
        earlier release) one by one."""
        removed: set[int] = set()
        await asyncio.gather(
            *(
                self._remove_batch(instance, [(i, request.refs[i]) for i in indices], removed)
                for instance, indices in _batches([ref.instance_name for ref in request.refs])
            )
        )
        rest = [i for i in range(len(request.refs)) if i not in removed]
        problems: list[str | None] = [None] * len(request.refs)
        alone = await _bounded([self._remove(request.refs[i]) for i in rest])
        for index, problem in zip(rest, alone, strict=True):
            problems[index] = problem
        return RemovedTasks(problems=problems)

    async def _remove_batch(self, instance: str, refs: list[tuple[int, TaskRef]], removed: set[int]) -> None:
        try:
            client = await self._jobs.instances.resolve(instance)
            if not client.takes_batches:
                return
            answers = await client.remove_batch([ref.job_submission_id for _, ref in refs])
            if len(answers) != len(refs):
                raise ValueError(f"{len(answers)} answers to a batch of {len(refs)}")
        except Exception as err:
            activity.logger.info("a removal batch on %s was not taken: %s", instance, err)
            return
        for (index, _), answer in zip(refs, answers, strict=True):
            if answer.task is not None or answer.status_code == HTTP_NOT_FOUND:  # removed, or before
                removed.add(index)

    async def _remove(self, ref: TaskRef) -> str | None:
        pause = _FIRST_PAUSE
        for attempt in range(1, _REMOVE_ATTEMPTS + 1):
            try:
                client = await self._jobs.instances.resolve(ref.instance_name)
                await remove_task(client, ref.job_submission_id)
                return None
            except Exception as err:
                if attempt == _REMOVE_ATTEMPTS:
                    return f"could not remove the task from {ref.instance_name}: {err}"
                _beat()
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
        return None  # not reached: the last attempt returns


def _batches(instances: list[str | None]) -> list[tuple[str, list[int]]]:
    """The indices of the items on each instance (None: an item taken alone), in batches of _BATCH."""
    by_instance: dict[str, list[int]] = {}
    for index, instance in enumerate(instances):
        if instance is not None:
            by_instance.setdefault(instance, []).append(index)
    return [
        (instance, indices[first : first + _BATCH])
        for instance, indices in by_instance.items()
        for first in range(0, len(indices), _BATCH)
    ]


async def _bounded(steps: list[Awaitable[T]]) -> list[T]:
    gate = asyncio.Semaphore(_AT_ONCE)

    async def one(step: Awaitable[T]) -> T:
        async with gate:
            return await step

    return list(await asyncio.gather(*(one(step) for step in steps)))


async def _retried(step: Callable[[], Awaitable[T]], *, transient_for: float = _TRANSIENT_FOR) -> T:
    """`step` until it succeeds, as a JobWorkflow's retry policy would run its activity: an agent's
    refusal AGENT_ERROR_ATTEMPTS times, a transient failure or a full agent for `transient_for` seconds."""
    deadline = time.monotonic() + transient_for
    pause, refusals = _FIRST_PAUSE, 0
    while True:
        try:
            return await step()
        except ApplicationError as err:
            refusals += err.type != _WAITING_FOR_CAPACITY
            if err.non_retryable or refusals >= AGENT_ERROR_ATTEMPTS or time.monotonic() > deadline:
                raise
        except Exception:
            if time.monotonic() > deadline:
                raise
        _beat()
        await asyncio.sleep(pause)
        pause = min(pause * 2, _LONGEST_PAUSE)


def _beat() -> None:
    """A heartbeat, where the batch runs as a regular activity (a local one has none)."""
    if not activity.info().is_local:
        activity.heartbeat()


def _failure(err: Exception) -> StepFailure:
    if isinstance(err, ApplicationError):
        return StepFailure(type=err.type, message=err.message)
    return StepFailure(message=str(err) or type(err).__name__)
