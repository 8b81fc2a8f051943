"""JobWorkflow: one submission of one job (a node of a replica), seed 001's job lifecycle STEP 1-5.

SUBMITTED -> placed by its fleet -> alloc -> PROVISIONING -> task submitted -> PULLING -> job started ->
RUNNING -> TERMINATING -> task stopped and removed, capacity released -> TERMINATED | DONE | FAILED | ABORTED.
Node 0 enqueues its replica in the fleet (workflows/fleet.py); each node waits for `placed`, or
`placement_refused` (FAILED_TO_START_DUE_TO_NO_CAPACITY), logging once that it is `queued`. Its capacity
goes back with `release` after its task is removed; sent by a job stopped while it waits, `release`
withdraws the replica. A lost instance (INSTANCE_UNREACHABLE from the fleet) ends the job at once.
Every change is an event folded with `core.eventlog.apply_job_event` and sent to the run, which stores it;
the status is never set any other way, so replaying the stored log gives this state.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from core.eventlog import Event
    from core.fleets.messages import (
        FLEET_ENQUEUE,
        FLEET_RELEASE,
        JOB_PLACED,
        JOB_QUEUED,
        JOB_REFUSED,
        ReleaseJob,
    )
    from core.jobs.state_machine import JobState, apply_job_event
    from core.jobs.transitions import (
        fatal,
        last_note,
        outcome_events,
        reason_for_failure,
    )
    from core.status import JobTerminationReason
    from core.wire import activity_names as names
    from core.wire.messages import (
        JobDescription,
        JobInput,
        JobOutcome,
        Placement,
        PlacementRefused,
        PrepareTask,
        Queued,
        StartJob,
        StopTask,
        TaskRef,
        TerminateJob,
        WatchJob,
        job_submission_id,
    )
    from workflows.job_news import JobNews

# Effects that talk to an agent retry quickly: a worker restart or a busy agent must not cost seconds.
_QUICK_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=2)
)
_STEP_HEARTBEAT = timedelta(seconds=10)
# The watch long-polls its agent up to 5 s per request; the SDK sends heartbeats at most every 0.8 x this,
# so a longer timeout means fewer of them for every running job, at the cost of noticing a dead worker later.
_WATCH_HEARTBEAT = timedelta(seconds=20)
# Past this the agent is presumed gone even if it answered before: the grace period has long ended.
_STOP_MARGIN = timedelta(seconds=30)
_LOST = JobTerminationReason.INSTANCE_UNREACHABLE


class _Terminated(Exception):
    """The run asked this job to stop while a step was in flight."""


@workflow.defn
class JobWorkflow:
    def __init__(self) -> None:
        self._events: list[Event] = []
        self._state: JobState | None = None
        self._terminate: TerminateJob | None = None
        self._input: JobInput | None = None
        self._instance: str | None = None
        self._killed = False  # a stop with no grace period (an abort) was sent to the agent
        self._placement: Placement | None = None
        self._refused: str | None = None
        self._queued = False
        self._waiting = False  # "waiting for capacity" is logged
        self._withdrawn = False  # stopped while waiting: the fleet must not place it (nor its replica)
        self._lost = False  # the fleet lost the instance: no stop to send, no task to remove
        self._news: JobNews | None = None

    @workflow.signal
    def terminate(self, request: TerminateJob) -> None:
        # The first reason wins; a later abort still shortens the grace period, and a lost instance ends
        # the job at once whatever it was terminating for.
        self._lost = self._lost or request.reason == _LOST
        if self._terminate is None or (request.abort and not self._terminate.abort):
            reason = request.reason if self._terminate is None else self._terminate.reason
            self._terminate = request.model_copy(update={"reason": reason})

    @workflow.signal(name=JOB_PLACED)
    def placed(self, placement: Placement) -> None:
        self._placement = self._placement or placement

    @workflow.signal(name=JOB_REFUSED)
    def placement_refused(self, refused: PlacementRefused) -> None:
        self._refused = self._refused or refused.reason

    @workflow.signal(name=JOB_QUEUED)
    def queued(self, queued: Queued) -> None:
        self._queued = True

    @workflow.query
    def describe(self) -> JobDescription:
        assert self._input is not None
        return JobDescription(job_submission_id=self._id, events=list(self._events))

    @property
    def _id(self) -> str:
        inp = self._input
        assert inp is not None
        return job_submission_id(inp.run_id, inp.replica_num, inp.job_num, inp.submission_num)

    @workflow.run
    async def run(self, inp: JobInput) -> JobOutcome:
        self._input = inp
        self._news = JobNews(inp, lambda: (self._events, self._state))
        self._log(
            "submit",
            replica=inp.replica_num,
            job=inp.job_num,
            submission=inp.submission_num,
            priority=inp.priority,
        )
        # The run knows it was submitted: the submit event goes to the store with the job's first news.
        try:
            await self._provision_and_run(inp)
        except _Terminated:
            self._log_stop()
            self._require_news().publish()
        return await self._clean_up(inp)

    async def _provision_and_run(self, inp: JobInput) -> None:
        placement = await self._place(inp)
        if placement is None:
            return
        self._instance = placement.instance_name
        self._log("alloc", instance=placement.instance_name)
        self._require_news().publish(soon=True)
        try:
            await self._step(
                names.PREPARE_TASK,
                PrepareTask(
                    job_submission_id=self._id,
                    instance_name=placement.instance_name,
                    task_name=inp.spec.run_name,
                    resources=inp.resources,
                    env=inp.spec.env,
                ),
                timeout=timedelta(minutes=10),
            )
            self._log("pull")
            self._require_news().publish(soon=True)
            spec = inp.spec.model_copy(update={"cluster_info": placement.cluster})
            await self._step(
                names.START_JOB,
                StartJob(
                    job_submission_id=self._id,
                    instance_name=placement.instance_name,
                    spec=spec,
                    code_hash=inp.code_hash,
                ),
                timeout=timedelta(minutes=10),
            )
        except ActivityError as err:
            self._fail_from(err, JobTerminationReason.EXECUTOR_ERROR)
            return
        self._log("start")
        self._require_news().publish()
        outcome = await self._watch(placement.instance_name)
        assert self._state is not None
        for event in outcome_events(self._state, outcome):
            self._log(*event)
        # No news yet: the clean-up that follows ends with the job's last word, which carries these. Sent
        # on their own, the run would hear a job that is TERMINATING and tell it to terminate.

    async def _place(self, inp: JobInput) -> Placement | None:
        """Wait for the fleet's decision (node 0 asks for the whole replica); None when it is refused."""
        fleet = workflow.get_external_workflow_handle(inp.fleet_workflow_id)
        if inp.enqueue is not None:
            try:
                await fleet.signal(FLEET_ENQUEUE, inp.enqueue)
            except FailureError:
                reason = JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY
                self._log(*fatal(reason, f"its fleet is not running ({inp.fleet_workflow_id})"))
                return None
        while True:
            await workflow.wait_condition(
                lambda: (
                    self._placement is not None
                    or self._terminate is not None
                    or self._refused is not None
                    or (self._queued and not self._waiting)
                )
            )
            if self._placement is not None:
                return self._placement
            if self._terminate is not None:
                self._withdrawn = True  # the clean-up tells the fleet, which drops the replica's request
                raise _Terminated()
            if self._refused is not None:
                self._log(*fatal(JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY, self._refused))
                return None
            self._waiting = True
            self._log("memo", waiting="capacity")
            self._require_news().publish()

    async def _watch(self, instance: str) -> JobOutcome:
        watch = workflow.start_activity(
            names.WATCH_JOB,
            WatchJob(job_submission_id=self._id, instance_name=instance),
            result_type=JobOutcome,
            start_to_close_timeout=timedelta(days=365),
            heartbeat_timeout=_WATCH_HEARTBEAT,
            retry_policy=_QUICK_RETRY,
        )
        stop_requested = asyncio.ensure_future(workflow.wait_condition(lambda: self._terminate is not None))
        await workflow.wait([watch, stop_requested], return_when=asyncio.FIRST_COMPLETED)
        if watch.done():
            stop_requested.cancel()
            return watch.result()
        # Stopping a running job: log why, ask the agent, then keep watching until the process has ended
        # (the agent sends SIGKILL once the grace period is over) so the last log bytes are kept too.
        request = self._log_stop()
        self._require_news().publish()
        if self._lost:
            return self._gone(watch)
        await self._stop_task(instance, request)
        # A later abort (`ferry stop -x` during the grace period) kills at once: the agent lets the
        # shorter of two stop requests win.
        self._killed = request.abort
        deadline = workflow.now() + timedelta(seconds=self._grace(request)) + _STOP_MARGIN
        while not watch.done():
            try:
                await workflow.wait_condition(
                    lambda: watch.done() or self._abort_requested() or self._lost,
                    timeout=max(deadline - workflow.now(), timedelta(0)),
                )
            except TimeoutError:
                watch.cancel()
                return JobOutcome(
                    termination_reason=JobTerminationReason.INSTANCE_UNREACHABLE,
                    termination_message="the job did not end after it was stopped",
                )
            if not watch.done() and self._lost:
                return self._gone(watch)
            if not watch.done() and self._abort_requested():
                self._killed = True
                assert self._terminate is not None
                await self._stop_task(instance, self._terminate)
                deadline = min(deadline, workflow.now() + _STOP_MARGIN)
        return watch.result()

    def _gone(self, watch: workflow.ActivityHandle[JobOutcome]) -> JobOutcome:
        """The fleet lost the instance: nothing more will come from there."""
        _abandon(watch)
        return JobOutcome(termination_reason=_LOST, termination_message="its instance was lost")

    def _abort_requested(self) -> bool:
        """An abort arrived after a graceful stop was sent: the job is still in its grace period."""
        return not self._killed and self._terminate is not None and self._terminate.abort

    async def _stop_task(self, instance: str, request: TerminateJob) -> None:
        """Ask the agent to stop the job: SIGTERM, then SIGKILL once the grace period is over."""
        with contextlib.suppress(ActivityError):  # if the agent is gone, the watch says so
            await workflow.execute_activity(
                names.STOP_TASK,
                StopTask(
                    job_submission_id=self._id,
                    instance_name=instance,
                    reason=request.reason,
                    message=request.message,
                    timeout=self._grace(request),
                ),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=3),
            )

    def _grace(self, request: TerminateJob) -> float:
        assert self._input is not None
        if request.abort or self._input.stop_duration is None:
            return 0.0
        return float(self._input.stop_duration)

    def _log_stop(self) -> TerminateJob:
        request = self._terminate
        assert request is not None
        kind = None if request.reason == _LOST else "cancel"
        self._log(*fatal(request.reason, request.message or "stopped by the run", kind))
        return request

    def _fail_from(self, err: ActivityError, reason: JobTerminationReason) -> None:
        if isinstance(err.cause, CancelledError):
            raise _Terminated() from err
        # An activity that fails for a reason says so by its ApplicationError type; the note is its
        # message alone (str() would prefix the type, which the reason already is).
        cause = err.cause
        if isinstance(cause, ApplicationError):
            reason = reason_for_failure(cause.type, reason)
        self._log(*fatal(reason, cause.message if isinstance(cause, FailureError) else str(err)))

    async def _step(self, activity: str, arg: Any, *, timeout: timedelta) -> Any:
        """Run an activity unless the run asks this job to stop first (then cancel it)."""
        if self._terminate is not None:
            raise _Terminated()
        # Cancelling waits for the attempt in flight to end, so the clean-up that follows never races
        # an allocation or a task submission that is still landing on the agent; the steps heartbeat,
        # so that wait is short even if their worker died.
        handle = workflow.start_activity(
            activity,
            arg,
            start_to_close_timeout=timeout,
            retry_policy=_QUICK_RETRY,
            heartbeat_timeout=_STEP_HEARTBEAT,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        stop_requested = asyncio.ensure_future(workflow.wait_condition(lambda: self._terminate is not None))
        await workflow.wait([handle, stop_requested], return_when=asyncio.FIRST_COMPLETED)
        if handle.done():
            stop_requested.cancel()
            return handle.result()
        if self._lost:  # nothing of the step can land on a lost instance: no need to wait for it
            _abandon(handle)
        else:
            handle.cancel()
            with contextlib.suppress(ActivityError, CancelledError):
                await handle
        raise _Terminated()

    async def _clean_up(self, inp: JobInput) -> JobOutcome:
        """STEP 5: stop and remove the task, free the capacity, then the finished status."""
        state = self._state
        assert state is not None
        if state.allocated and self._instance is not None:
            if self._lost:
                note = f"{self._instance} is unreachable: its task is removed if it comes back"
                self._log("exception", type="free", severity=1, note=note)
            else:
                await self._remove_task(self._instance)
            self._log("free")
        if self._placement is not None or self._withdrawn:  # granted, or maybe on its way
            releasing = asyncio.ensure_future(self._release(inp))  # sent with the last word below
        else:
            releasing = None
        state = self._state
        assert state is not None and state.termination_reason is not None
        reason = state.termination_reason
        self._log("clean", status=reason.to_status(), reason=reason)
        self._require_news().publish()
        await self._require_news().published()
        if releasing is not None:
            await releasing
        return JobOutcome(
            termination_reason=reason, termination_message=last_note(state), exit_status=state.exit_status
        )

    async def _remove_task(self, instance: str) -> None:
        ref = TaskRef(job_submission_id=self._id, instance_name=instance)
        try:
            await workflow.execute_activity(
                names.RELEASE_TASK,
                ref,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=5)),
            )
            self._log("release", ranks="all", final=True)
        except ActivityError as err:
            note = f"could not remove the task from {instance}: {err.cause or err}"
            self._log("exception", type="free", severity=1, note=note)

    async def _release(self, inp: JobInput) -> None:
        """The capacity back to the fleet, once the task is gone (a fleet deleted meanwhile needs nothing)."""
        fleet = workflow.get_external_workflow_handle(inp.fleet_workflow_id)
        with contextlib.suppress(FailureError):
            await fleet.signal(FLEET_RELEASE, ReleaseJob(job_id=self._id))

    def _log(self, name: str, context: dict[str, Any] | None = None, /, **more: Any) -> None:
        event = Event(
            timestamp=workflow.now().timestamp(),
            name=name,
            context={k: v for k, v in {**(context or {}), **more}.items() if v is not None},
        )
        self._state = apply_job_event(self._state, event)
        self._events.append(event)

    def _require_news(self) -> JobNews:
        assert self._news is not None
        return self._news


def _abandon(handle: workflow.ActivityHandle[Any]) -> None:
    """Cancel an activity whose outcome no longer matters."""
    handle.cancel()
    handle.add_done_callback(lambda done: None if done.cancelled() else done.exception())
