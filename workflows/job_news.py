"""A job's news for its run: what JobWorkflow sends it by signal, and how often.

Every change of a job is an event; the run hears of them with the job's status
(`core.wire.job_messages.JobUpdate`)
and stores them (RunWorkflow._flush), so the job's eventlog is part of the run's history. A signal costs
both workflows a workflow task and the run a store write, so news is sent only as often as it is needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from core.eventlog import Event
    from core.jobs.state_machine import JobState
    from core.jobs.transitions import job_update
    from core.wire.job_messages import JobInput, JobUpdate
    from workflows import signals

RUN_SIGNAL = "job_update"
# How long news of a quick step may wait for the next: short against how long a person watching
# `ferry ps` notices, long against the steps from placement to running on a ready instance.
NEWS_DELAY = timedelta(seconds=1)


class JobNews:
    """The news channel of one job submission to its run.

    The job goes on while news travels (a local activity sends it, workflows/signals.py, beside the job's next
    step). One signal is in flight at a time, so the run hears them in order; news asked for meanwhile
    goes with the next. News that can wait (`soon`: a step the next one usually follows within moments,
    provisioning -> pulling -> running) goes after NEWS_DELAY unless news that cannot wait takes it along.
    """

    def __init__(
        self, inp: JobInput, job: Callable[[], tuple[list[Event], JobState | None]], *, revised: bool
    ) -> None:
        self._input = inp
        self._job = job  # the job's events so far and its state
        self._sent = 0  # events the run has been sent
        self._upto = 0  # events the run is to hear of (later ones wait for their own news)
        self._state: JobState | None = None  # the job as of those
        self._sending: asyncio.Future[None] | None = None
        self._delayed: asyncio.Future[None] | None = None
        self._last: int | None = None  # events up to the job's last word
        self._revised = revised  # its revision takes the patches before it (workflows/patches.py)
        self._by_result = revised  # the last word goes with the job's result (docs/jobs.md#the-last-word)
        self._kept: JobUpdate | None = None  # the last word, kept for the result

    def publish(self, *, soon: bool = False, last: bool = False) -> None:
        """Tell the run every event logged so far (soon: within NEWS_DELAY; last: the job's last word)."""
        if soon:
            if self._delayed is None:
                self._delayed = asyncio.ensure_future(self._publish_later())
            return
        if self._delayed is not None:
            self._delayed.cancel()
            self._delayed = None
        events, self._state = self._job()
        self._upto = len(events)
        if last:
            self._last = self._upto
        if self._sending is None or self._sending.done():
            self._sending = asyncio.ensure_future(self._send())

    async def published(self) -> None:
        """Until every event asked for has reached the run (or, the last word, is kept for the result)."""
        while self._sending is not None and not self._sending.done():
            await self._sending

    def by_signal(self) -> None:
        """The run continues as new: it will not see this workflow's result, so the last word goes by signal
        (`last_word`, awaited before the job ends, sends one kept meanwhile)."""
        self._by_result = False

    async def last_word(self) -> JobUpdate | None:
        """The job's last word for its result, once `published`: None when it went by signal. The job ends
        in the same workflow task, so the run's `last_word_by_signal` cannot come between."""
        kept, self._kept = self._kept, None
        if kept is not None and not self._by_result:
            await signals.send_by_workflow(self._input.run_workflow_id, RUN_SIGNAL, kept)
            return None
        return kept

    async def _publish_later(self) -> None:
        await asyncio.sleep(NEWS_DELAY.total_seconds())  # a durable timer
        self._delayed = None
        self.publish()

    async def _send(self) -> None:
        inp = self._input
        while self._sent < self._upto:
            state = self._state
            assert state is not None
            events, _ = self._job()
            start, self._sent = self._sent, self._upto
            update = job_update(inp, state, workflow.now().timestamp(), start, events[start : self._sent])
            # The run waits for every job's last word, so it is there; unless it was terminated. It goes with
            # the job's result (`last_word`), else by the workflow itself: the workflow task that sends it is
            # not the one that ends the job, which the server refuses when a signal came meanwhile, and a
            # local activity's signal sent again by the task redone would be dropped as a repeat, its newer
            # events with it.
            if self._sent == self._last and self._by_result:
                self._kept = update
            elif self._sent == self._last:
                await signals.send_by_workflow(inp.run_workflow_id, RUN_SIGNAL, update)
            else:
                await signals.send_one(
                    inp.run_workflow_id, RUN_SIGNAL, update, f"news-{start}", by_revision=self._revised
                )
