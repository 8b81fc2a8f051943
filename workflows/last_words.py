"""A run's jobs' last words, from their workflows' results (docs/jobs.md#the-last-word).

A job's last word (its end and the events that led there) reaches its run with the job workflow's
result: the run hears the child's end anyway, so the signal the job sent before, and the workflow task
it cost both, go. A run that continues as new would not see the results of the jobs it started: before
it does, it asks those still running to send their last words by signal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, FailureError

with workflow.unsafe.imports_passed_through():
    from core.wire.job_messages import JobEnding, JobUpdate
    from workflows.handles import settle
    from workflows.web_ui import failed_job_ending

JobHandle = workflow.ChildWorkflowHandle[Any, JobEnding]
# JobWorkflow's signal that its last word go by signal (workflows/job.py)
LAST_WORD_BY_SIGNAL = "last_word_by_signal"


class LastWords:
    def __init__(self, by_result: bool, hear: Callable[[JobUpdate], None]) -> None:
        self._by_result = by_result  # False: a run submitted before, whose jobs send them by signal
        self._hear = hear
        self._running: dict[str, JobHandle] = {}  # the jobs that will tell it in their results, by id

    @property
    def awaited(self) -> bool:
        """Some running job will tell its last word in its result."""
        return bool(self._running)

    def follow(self, job: JobHandle) -> None:
        if not self._by_result:
            settle(job)
            return
        self._running[job.id] = job
        job.add_done_callback(self._ended)

    def _ended(self, job: JobHandle) -> None:
        self._running.pop(job.id, None)
        if job.cancelled():
            return
        error = job.exception()
        if error is None:
            ending: JobEnding | None = job.result()
        else:  # a failed job's workflow fails, with its result as the details (workflows/web_ui.py)
            ending = failed_job_ending(error.cause if isinstance(error, ChildWorkflowError) else None)
        if ending is not None and ending.last_word is not None:
            self._hear(ending.last_word)

    async def by_signal(self) -> None:
        """Before continuing as new: the running jobs send their last words by signal. One that ended
        already has its result on the way to this execution, which waits for it."""
        running, self._running = list(self._running.values()), {}

        async def tell(job: JobHandle) -> None:
            try:
                await job.signal(LAST_WORD_BY_SIGNAL)
            except FailureError:
                await asyncio.wait([job])  # `_ended` hears its last word

        await asyncio.gather(*(tell(job) for job in running))
