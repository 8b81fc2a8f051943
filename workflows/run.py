"""RunWorkflow: one applied configuration, seed 001's run lifecycle STEP 1-5.

Submits one JobWorkflow child per replica x node, hears of them by signal, asks `core.runs.derivation` what
the
run's status is, and acts on the decision: resubmit a replica in place, wait out a pending backoff on a
durable timer, or terminate every job and assign the finished status. It is the only place that does.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from core.eventlog import Event
    from core.fleets.messages import FLEET_SET_PRIORITY, SetQueuedPriority
    from core.jobs.spec import nodes_count, replica_count
    from core.jobs.transitions import replicas_to_resubmit, status_message, stop_reason, update_events
    from core.runs.derivation import derive_run_status
    from core.runs.retry import pending_backoff
    from core.runs.state_machine import RunState, apply_run_event
    from core.runs.submissions import job_input, waiting_requests
    from core.status import JobTerminationReason, RunStatus
    from core.wire import activity_names as names
    from core.wire.messages import (
        JobUpdate,
        RecordJob,
        RecordRun,
        RunCarry,
        RunDescription,
        RunInput,
        RunResult,
        SetPriority,
        StopReply,
        StopRequest,
        TerminateJob,
        fleet_workflow_id,
        job_workflow_id,
    )
    from workflows.job import JobWorkflow
    from workflows.search_attributes import SA_STATUS

_RECORD_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=2)
)

# The sibling jobs of a replica that is resubmitted in place end by the server's hand.
_SIBLING_REASON = JobTerminationReason.TERMINATED_BY_SERVER


@workflow.defn
class RunWorkflow:
    def __init__(self) -> None:
        self._input: RunInput | None = None
        self._state: RunState | None = None
        self._events: list[Event] = []
        self._first_seq = 0
        self._flushed = 0
        self._updates: list[JobUpdate] = []
        self._stop: StopRequest | None = None
        self._retry_at: float | None = None
        self._to_start: list[tuple[int, int, int]] = []  # (replica, job, submission) logged, not started
        self._pending_signals: list[Any] = []
        self._terminated: set[tuple[int, int, int, bool]] = set()  # (replica, job, submission, abort) told
        self._stop_news = False
        self._priorities: list[int] = []  # `ferry set-priority`, not yet logged
        self._job_news: list[RecordJob] = []  # heard from the jobs, to store with the next flush
        self._unheard: set[str] = set()  # jobs started whose last word has not come yet
        self._published_status = RunStatus.SUBMITTED.value  # FerryStatus as `ferry apply` starts the run

    # --- messages ---------------------------------------------------------------------------------

    @workflow.signal
    def job_update(self, update: JobUpdate) -> None:
        self._updates.append(update)

    @workflow.signal
    def set_priority(self, request: SetPriority) -> None:
        self._priorities.append(request.priority)

    @workflow.update
    async def stop(self, request: StopRequest) -> StopReply:
        """Stop (gracefully) or abort the run; a later abort overrides an earlier stop."""
        # A stop sent with the run's start may be handled before `run` has logged its first event.
        await workflow.wait_condition(lambda: self._state is not None)
        if self._stop is None or (request.abort and not self._stop.abort):
            self._stop = request
            self._stop_news = True
        state = self._state
        assert state is not None
        return StopReply(status=state.status, termination_reason=state.termination_reason)

    @workflow.query
    def describe(self) -> RunDescription:
        assert self._input is not None and self._state is not None
        return RunDescription(
            run_id=self._input.run_id, state=self._state, events=list(self._events), first_seq=self._first_seq
        )

    # --- the lifecycle ----------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        self._input = inp
        if inp.carry is None:
            conf = inp.configuration
            self._log("submit", run_name=inp.run_name, project=inp.project, user=inp.user, type=conf.type)
            for replica in range(replica_count(conf)):
                self._submit_replica(replica)
            if self._to_start:
                # The first events go to the store with the jobs' first news (each job sends some within
                # a second or so): one store write fewer per run.
                await self._start_children()
            else:
                await self._flush()
        else:
            self._resume(inp.carry)
        # A finished run still hears its jobs' last words (a stopped sibling's clean-up may end after the
        # run's status is final): it is the one that stores their events.
        while not self._finished() or self._unheard:
            await self._wait_for_news()
            await self._step()
            if self._can_continue_as_new():
                workflow.continue_as_new(self._carry())
        state = self._state
        assert state is not None
        return RunResult(status=state.status, termination_reason=state.termination_reason)

    async def _wait_for_news(self) -> None:
        """Sleep until a job reports, a stop arrives, or a pending backoff ends (a durable timer)."""
        timeout = None
        if self._retry_at is not None:
            timeout = timedelta(seconds=max(self._retry_at - workflow.now().timestamp(), 0))
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: bool(self._updates) or self._stop_news or bool(self._priorities), timeout=timeout
            )

    async def _step(self) -> None:
        self._stop_news = False
        for update in self._drain_updates():
            self._apply_update(update)
        if self._finished():
            await self._flush()
            return
        self._apply_priorities()
        if self._stop_pending():
            assert self._stop is not None
            self._retry_at = None  # a PENDING run is not resubmitted
            self._log("status", status=RunStatus.TERMINATING, reason=stop_reason(self._stop.abort))
        elif self._retry_due():
            self._resubmit_all()
        elif self._state_status() != RunStatus.TERMINATING and self._state_status() != RunStatus.PENDING:
            self._decide()
        state = self._require_state()
        if state.status == RunStatus.TERMINATING:
            self._terminate_active_jobs()
            if all(j.status.is_finished() for j in state.jobs):
                final = state.termination_reason
                assert final is not None
                self._log("clean", status=final.to_status(), reason=final)
        await self._flush_and_start()

    async def _flush_and_start(self) -> None:
        # In one workflow task: the store write and the new children need not wait for each other.
        await asyncio.gather(self._flush(), self._start_children())

    def _decide(self) -> None:
        inp = self._require_input()
        state = self._require_state()
        now = workflow.now().timestamp()
        decision = derive_run_status(
            state.job_views(),
            stop_criteria=inp.configuration.stop_criteria.value,
            retry=inp.configuration.retry,
            now=now,
            run_submitted_at=inp.submitted_at,
            attempt=state.retries,
        )
        if decision.resubmit_in_place:
            # Seed 001 STEP 2: another replica is still active, so the failed ones start again at once.
            # A PENDING decision resubmits nothing yet: `_resubmit_all` does once the backoff is over.
            attempt = state.retries
            self._log("retry", replicas=decision.replicas_to_resubmit, attempt=attempt, backoff=0)
            for replica in decision.replicas_to_resubmit:
                self._stop_replica(replica)
                self._submit_replica(replica)
        if decision.status != self._state_status() or decision.termination_reason is not None:
            if decision.status == RunStatus.PENDING:
                self._retry_at = decision.retry_at or now + pending_backoff(state.retries)
                # Seed 000/001: the old jobs of a retrying replica stop (a node still running after
                # another failed would hold its instance through the backoff and beyond).
                for replica in decision.replicas_to_resubmit:
                    self._stop_replica(replica)
            if decision.status != self._state_status():
                self._log("status", status=decision.status, reason=decision.termination_reason)

    def _resubmit_all(self) -> None:
        """STEP 3: the pending backoff is over; every replica gets a new submission."""
        state = self._require_state()
        replicas = replicas_to_resubmit(state)
        backoff = pending_backoff(state.retries)
        self._log("retry", replicas=replicas, attempt=state.retries, backoff=backoff)
        for replica in replicas:
            self._submit_replica(replica)
        self._retry_at = None
        self._log("status", status=RunStatus.SUBMITTED)

    # --- jobs -------------------------------------------------------------------------------------

    def _submit_replica(self, replica: int) -> None:
        """Log a new submission of every job of a replica; `_start_children` starts them, node 0 last:
        it enqueues the replica, and the fleet may place it at once, so every node must be there."""
        inp = self._require_input()
        new = []
        for job in range(nodes_count(inp.configuration)):
            current = self._state.job(replica, job) if self._state is not None else None
            submission = 0 if current is None else current.submission_num + 1
            self._log("job-submit", replica=replica, job=job, submission=submission)
            new.append((replica, job, submission))
        self._to_start += reversed(new)

    def _stop_replica(self, replica: int) -> None:
        """Terminate the still-active jobs of a replica that is about to be resubmitted (seed 000)."""
        state = self._require_state()
        for job in state.jobs:
            if job.replica_num == replica and job.status.is_active():
                self._signal(
                    job.replica_num,
                    job.job_num,
                    job.submission_num,
                    TerminateJob(reason=_SIBLING_REASON, message="its replica is resubmitted"),
                )

    def _terminate_active_jobs(self) -> None:
        state = self._require_state()
        reason = state.termination_reason
        assert reason is not None
        abort = self._stop is not None and self._stop.abort
        for job in state.jobs:
            key = (job.replica_num, job.job_num, job.submission_num, abort)
            if job.status.is_active() and key not in self._terminated:
                self._terminated.add(key)
                self._signal(
                    job.replica_num,
                    job.job_num,
                    job.submission_num,
                    TerminateJob(reason=reason.to_job_termination_reason(), abort=abort),
                )

    def _signal(self, replica: int, job: int, submission: int, request: TerminateJob) -> None:
        handle = workflow.get_external_workflow_handle(
            job_workflow_id(self._workflow_id(), replica, job, submission)
        )
        self._pending_signals.append(handle.signal(JobWorkflow.terminate, request))

    async def _start_children(self) -> None:
        inp = self._require_input()
        while self._to_start:
            replica, job, submission = self._to_start.pop(0)
            child_id = job_workflow_id(self._workflow_id(), replica, job, submission)
            self._unheard.add(child_id)
            await workflow.start_child_workflow(
                JobWorkflow.run,
                job_input(inp, self._require_state(), self._workflow_id(), replica, job),
                id=child_id,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            )
        while self._pending_signals:
            # A job may finish before the signal reaches it: that is no error, its update is on its way.
            with contextlib.suppress(FailureError):
                await self._pending_signals.pop(0)

    def _apply_priorities(self) -> None:
        """`ferry set-priority`: logged, and the replicas still waiting move in the fleet's queue."""
        inp = self._require_input()
        for priority in self._priorities:
            self._log("priority", priority=priority)
            requests = waiting_requests(inp, self._require_state())
            if requests:
                fleet = workflow.get_external_workflow_handle(fleet_workflow_id(inp.project, inp.fleet))
                change = SetQueuedPriority(request_ids=requests, priority=priority)
                self._pending_signals.append(fleet.signal(FLEET_SET_PRIORITY, change))
        self._priorities = []

    def _apply_update(self, update: JobUpdate) -> None:
        self._job_news.append(update.record)
        if update.status.is_finished():
            key = (update.replica_num, update.job_num, update.submission_num)
            self._unheard.discard(job_workflow_id(self._workflow_id(), *key))
        if self._finished():
            return
        for name, context in update_events(self._require_state(), update):
            self._log(name, **context)

    # --- state, events, store ---------------------------------------------------------------------

    def _log(self, name: str, **context: Any) -> None:
        event = Event(
            timestamp=workflow.now().timestamp(),
            name=name,
            context={k: v for k, v in context.items() if v is not None},
        )
        self._state = apply_run_event(self._state, event)
        self._events.append(event)

    def _publish_status(self) -> None:
        """FerryStatus follows the status at each flush (not each event: a workflow task that goes through
        TERMINATING to DONE updates it once)."""
        status = self._require_state().status.value
        if status != self._published_status:
            workflow.upsert_search_attributes([SA_STATUS.value_set(status)])
            self._published_status = status

    async def _flush(self) -> None:
        inp, state = self._require_input(), self._require_state()
        start = self._flushed
        new = self._events[start - self._first_seq :]
        jobs, self._job_news = self._job_news, []
        self._publish_status()
        if not new and not jobs:
            return
        # A regular activity, not a local one: see JobWorkflow._publish.
        await workflow.execute_activity(
            names.RECORD_RUN,
            RecordRun(
                run_id=inp.run_id,
                status=state.status,
                termination_reason=state.termination_reason,
                status_message=status_message(state),
                start_seq=start,
                events=new,
                finished_at=state.status_since if state.status.is_finished() else None,
                jobs=jobs,
            ),
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=_RECORD_RETRY,
        )
        self._flushed = start + len(new)

    def _drain_updates(self) -> list[JobUpdate]:
        updates, self._updates = self._updates, []
        return updates

    def _finished(self) -> bool:
        return self._state is not None and self._state.status.is_finished()

    def _stop_pending(self) -> bool:
        return (
            self._stop is not None
            and self._state is not None
            and self._state.status != RunStatus.TERMINATING
            and not self._state.status.is_finished()
        )

    def _retry_due(self) -> bool:
        return self._retry_at is not None and workflow.now().timestamp() >= self._retry_at

    def _state_status(self) -> RunStatus:
        return self._require_state().status

    def _require_state(self) -> RunState:
        assert self._state is not None
        return self._state

    def _require_input(self) -> RunInput:
        assert self._input is not None
        return self._input

    def _workflow_id(self) -> str:
        return workflow.info().workflow_id

    def _can_continue_as_new(self) -> bool:
        return (
            workflow.info().is_continue_as_new_suggested()
            and not self._updates  # news that arrived during the step is not in the carry
            and not self._stop_news
            and not self._priorities
            and not self._to_start
            and not self._pending_signals
            and not self._job_news
            and workflow.all_handlers_finished()
        )

    def _carry(self) -> RunInput:
        return self._require_input().model_copy(
            update={
                "carry": RunCarry(
                    state=self._require_state(),
                    next_seq=self._flushed,
                    stop=self._stop,
                    retry_at=self._retry_at,
                    unheard=sorted(self._unheard),
                )
            }
        )

    def _resume(self, carry: RunCarry) -> None:
        self._state = carry.state
        self._first_seq = self._flushed = carry.next_seq
        self._stop = carry.stop
        self._retry_at = carry.retry_at
        self._unheard = set(carry.unheard)
        self._published_status = carry.state.status.value  # continue-as-new keeps the search attributes
