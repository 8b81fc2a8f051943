"""JobWorkflow: one submission of one job (a node of a replica), the job lifecycle of docs/jobs.md.

SUBMITTED -> placed by its fleet -> alloc -> PROVISIONING -> task submitted -> PULLING -> job started ->
RUNNING -> TERMINATING -> task stopped and removed, capacity released -> TERMINATED | DONE | FAILED | ABORTED.
Node 0 enqueues its replica in the fleet (workflows/fleet.py); each node waits for `placed`, or
`placement_refused` (FAILED_TO_START_DUE_TO_NO_CAPACITY), logging once that it is `queued`. Its capacity
goes back with `release` after its task is removed; sent by a job stopped while it waits, `release`
withdraws the replica. A lost instance (INSTANCE_UNREACHABLE from the fleet) ends the job at once.
Every change is an event folded with `core.jobs.state_machine.apply_job_event` and sent to the run, which
stores it; the status is never set any other way, so replaying the stored log gives this state. What the
workflow remembers beyond its log (the fleet's answer, a stop asked for) is `core.jobs.phases.JobControl`.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
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
    from core.jobs import transitions as job
    from core.jobs.phases import JobControl, PlacementOutcome, grace_seconds
    from core.jobs.state_machine import JobState, apply_job_event
    from core.jobs.transitions import INSTANCE_LOST, NO_END_AFTER_STOP, fatal, last_note, outcome_events
    from core.jobs.volumes import attach_request, detach_request
    from core.status import JobStatus, JobTerminationReason
    from core.web_ui import job_line
    from core.wire import revisions
    from core.wire.job_messages import (
        JobDescription,
        JobEnding,
        JobInput,
        Placement,
        PlacementRefused,
        Queued,
        TerminateJobRequest,
    )
    from core.wire.messages import TASK_ENDED, JobOutcome, PrepareAndStart, SSHEndpoint, SSHEndpointRequest
    from core.wire.workflow_ids import job_submission_id
    from workflows import activity_stubs, patches, retry_policies, signals
    from workflows.handles import abandon
    from workflows.job_agent import JobAgent, Stopped
    from workflows.job_news import JobNews
    from workflows.job_serving import ReplicaServing
    from workflows.job_startup import StartupWaits
    from workflows.job_utilization import UtilizationWatch
    from workflows.last_words import LAST_WORD_BY_SIGNAL
    from workflows.web_ui import end_job, show_job

# Past this the agent is presumed gone even if it answered before: the grace period has long ended.
_STOP_MARGIN = timedelta(seconds=30)
_AGENT_STEP_TIMEOUT = timedelta(minutes=10)  # an image pull or a big code archive may take a while
_STORE_STEP_TIMEOUT = timedelta(seconds=30)  # a volume's attachment: one short transaction
# A job's shorter history (docs/jobs.md#a-shorter-history): the one-step start and the task's removal as a
# local activity. Histories begun before take two steps and remove with a regular activity. One patch
# for both: each patch costs every history a marker and a search attribute update.
_SHORT_HISTORY = "short-job-history"
# dstack's utilization_policy sampled while the job runs (docs/jobs.md#utilization-policy); asked only of a
# job with a policy, so histories begun before (which never had one in their input) replay unchanged.
_UTILIZATION_POLICY = "utilization-policy"


@workflow.defn
class JobWorkflow:
    @workflow.init
    def __init__(self, inp: JobInput) -> None:
        self._input = inp
        # Its revision takes the patches before it, unasked (workflows/patches.py, core.wire.revisions).
        self._revised = inp.revision >= revisions.LAST_WORDS
        self._id = job_submission_id(inp.run_id, inp.replica_num, inp.job_num, inp.submission_num)
        self._events: list[Event] = []
        self._control = JobControl()
        submit = self._event(
            "submit",
            replica=inp.replica_num,
            job=inp.job_num,
            submission=inp.submission_num,
            priority=inp.priority,
        )
        self._state: JobState = apply_job_event(None, submit)
        self._events.append(submit)
        show_job(self._state)
        self._news = JobNews(inp, lambda: (self._events, self._state), revised=self._revised)
        self._agent = JobAgent(self._id, lambda: self._control)
        self._waits = StartupWaits(self._agent, lambda: self._control, self._log, self._news.publish)
        self._serving = (
            None if inp.service is None else ReplicaServing(inp, self._id, lambda: self._control, self._note)
        )

    @workflow.signal
    def terminate(self, request: TerminateJobRequest) -> None:
        self._control = self._control.on_terminate(request)

    @workflow.signal(name=JOB_PLACED)
    def placed(self, placement: Placement) -> None:
        self._control = self._control.on_placed(placement)

    @workflow.signal(name=JOB_REFUSED)
    def placement_refused(self, refused: PlacementRefused) -> None:
        self._control = self._control.on_refused(refused.reason)

    @workflow.signal(name=JOB_QUEUED)
    def queued(self, queued: Queued) -> None:
        self._control = self._control.on_queued()

    @workflow.signal(name=TASK_ENDED)
    def task_ended(self, outcome: JobOutcome) -> None:
        """From its instance's watch: the task's process has ended, and its log is stored."""
        self._control = self._control.on_task_ended(outcome, self._id)

    @workflow.signal(name=LAST_WORD_BY_SIGNAL)
    def last_word_by_signal(self) -> None:
        """From its run, about to continue as new: the job's result would reach the run's execution that
        ended, so its last word goes by signal (docs/jobs.md#the-last-word)."""
        self._news.by_signal()

    @workflow.signal
    def peers_started(self) -> None:
        """From its run: the jobs this one waits for (`startup_order`) have started."""
        self._control = self._control.on_peers_started()

    @workflow.update
    async def ssh_endpoint(self) -> SSHEndpoint:
        """`ferry attach`: where the job's agent lets its user in over SSH (docs/attach.md); refused, with
        the reason, unless the job is running."""
        state = self._state
        if self._control.terminate is not None:
            return SSHEndpoint(refused="the job is stopping")
        if state.status != JobStatus.RUNNING or state.instance is None:
            return SSHEndpoint(refused=f"the job is {state.status}")
        request = SSHEndpointRequest(job_submission_id=self._id, instance_name=state.instance)
        return await workflow.execute_activity(
            activity_stubs.ssh_endpoint,
            request,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=retry_policies.FEW_TRIES,  # an unreachable instance: said soon, not waited for
        )

    @workflow.query
    def describe(self) -> JobDescription:
        return JobDescription(job_submission_id=self._id, events=list(self._events))

    @workflow.run
    async def run(self, inp: JobInput) -> JobEnding:
        # The run knows it was submitted: the submit event goes to the store with the job's first news.
        try:
            await self._provision_and_run(inp)
        except Stopped:
            self._log_stop()
            self._news.publish()
        outcome = await self._clean_up(inp)
        return end_job(outcome, job_line(self._state))  # a FAILED job's workflow fails

    async def _provision_and_run(self, inp: JobInput) -> None:
        placement = await self._place(inp)
        if placement is None:
            return
        self._log("alloc", instance=placement.instance_name)
        self._news.publish(soon=True)
        try:
            attach = attach_request(inp, self._id, placement.instance_name)
            if attach is not None:  # its named volumes, or VOLUME_ERROR before anything starts
                await self._agent.step(activity_stubs.attach_volumes, attach, timeout=_STORE_STEP_TIMEOUT)
            # Told of its task's end by its fleet's watch of the instance, or watching it itself where the
            # fleet began before that watch (docs/jobs.md#the-instance-watch).
            owner = workflow.info().workflow_id if placement.watched else None
            prepare = job.prepare_task(inp, self._id, placement, owner)
            if job.starts_in_one_step(inp) and patches.taken(_SHORT_HISTORY, self._revised):
                start = job.start_job(inp, self._id, placement)
                both = PrepareAndStart(prepare=prepare, start=start)
                published = await self._agent.step(
                    activity_stubs.prepare_and_start, both, timeout=_AGENT_STEP_TIMEOUT
                )
                self._log("pull")
            else:
                await self._agent.step(activity_stubs.prepare_task, prepare, timeout=_AGENT_STEP_TIMEOUT)
                await self._waits.peers(inp)
                router = await self._waits.router(inp)
                start = job.start_job(inp, self._id, placement, router)
                self._log("pull")
                self._news.publish(soon=True)
                published = await self._agent.step(
                    activity_stubs.start_job, start, timeout=_AGENT_STEP_TIMEOUT
                )
        except ActivityError as err:
            self._fail_from(err, JobTerminationReason.EXECUTOR_ERROR)
            return
        self._log("start")
        if published:  # its container's ports, published on other host ports: `ferry ps` shows where
            self._log("memo", ports=published)
        self._news.publish()
        if self._serving is not None:
            self._serving.start(placement.instance_name)
        outcome = await self._watch(placement)
        for event in outcome_events(self._state, outcome):
            self._log(*event)
        # No news yet: the clean-up that follows ends with the job's last word, which carries these. Sent
        # on their own, the run would hear a job that is TERMINATING and tell it to terminate.

    async def _place(self, inp: JobInput) -> Placement | None:
        """Wait for the fleet's decision (node 0 asks for the whole replica); None when it is refused."""
        enqueue = inp.enqueue
        fleet = inp.fleet_workflow_id
        if enqueue is not None and not await signals.send_one(
            fleet, FLEET_ENQUEUE, enqueue, "enqueue", by_revision=self._revised
        ):
            reason = JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY
            self._log(*fatal(reason, f"its fleet is not running ({inp.fleet_workflow_id})"))
            return None
        while True:
            await workflow.wait_condition(lambda: self._control.placement_outcome() is not None)
            outcome = self._control.placement_outcome()
            assert outcome is not None  # the condition above
            self._control = self._control.after(outcome)
            if outcome == PlacementOutcome.PLACED:
                return self._control.placement
            if outcome == PlacementOutcome.WITHDRAW:
                raise Stopped()  # the clean-up tells the fleet, which drops the replica's request
            if outcome == PlacementOutcome.REFUSED:
                reason = JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY
                self._log(*fatal(reason, self._control.refused))
                return None
            self._log("memo", waiting="capacity")
            self._news.publish()

    async def _watch(self, placement: Placement) -> JobOutcome:
        instance = placement.instance_name
        watch: asyncio.Future[JobOutcome] = (
            asyncio.ensure_future(self._told_end()) if placement.watched else self._agent.watch(instance)
        )
        utilization = self._watch_utilization(instance)
        await self._agent.until_stopped_or(watch)
        if utilization is not None and not utilization.done():
            utilization.cancel()
        if watch.done():
            return watch.result()
        # Stopping a running job: log why, ask the agent, then keep watching until the process has ended
        # (the agent sends SIGKILL once the grace period is over) so the last log bytes are kept too.
        request = self._log_stop()
        self._news.publish()
        if self._control.lost:
            return self._gone(watch)
        if self._serving is not None:
            # Out of the proxies' rotation first, its requests in flight finished: a stop cuts none.
            await self._serving.drain(self._grace(request))
        await self._agent.stop_task(instance, request, self._grace(request))
        # A later abort (`ferry stop -x` during the grace period) kills at once: the agent lets the
        # shorter of two stop requests win.
        self._control = self._control.stop_sent(request)
        deadline = workflow.now() + timedelta(seconds=self._grace(request)) + _STOP_MARGIN
        while not watch.done():
            try:
                await workflow.wait_condition(
                    lambda: watch.done() or self._control.abort_requested() or self._control.lost,
                    timeout=max(deadline - workflow.now(), timedelta(0)),
                )
            except TimeoutError:
                watch.cancel()
                return NO_END_AFTER_STOP
            if not watch.done() and self._control.lost:
                return self._gone(watch)
            if not watch.done() and self._control.abort_requested():
                abort = self._control.terminate
                assert abort is not None  # abort_requested() says so
                self._control = self._control.stop_sent(abort)
                await self._agent.stop_task(instance, abort, self._grace(abort))
                deadline = min(deadline, workflow.now() + _STOP_MARGIN)
        return watch.result()

    def _watch_utilization(self, instance: str) -> asyncio.Future[None] | None:
        """Its GPUs sampled until the policy's window is met, where the run has a utilization_policy."""
        policy = self._input.utilization_policy
        if policy is None or not workflow.patched(_UTILIZATION_POLICY):
            return None
        watch = UtilizationWatch(self._id, policy, self._note, self._stop_for_utilization)
        if self._input.resources.gpu == 0:
            watch.not_applied()
            return None
        return asyncio.ensure_future(watch.run(instance))

    def _stop_for_utilization(self, request: TerminateJobRequest) -> None:
        self._control = self._control.on_terminate(request)

    async def _told_end(self) -> JobOutcome:
        """Until the instance's watch tells how the task ended."""
        await workflow.wait_condition(lambda: self._control.ended is not None)
        assert self._control.ended is not None  # the condition above
        return self._control.ended

    def _gone(self, watch: asyncio.Future[JobOutcome]) -> JobOutcome:
        """The fleet lost the instance: nothing more will come from there."""
        if isinstance(watch, workflow.ActivityHandle):
            abandon(watch)
        else:
            watch.cancel()
        return INSTANCE_LOST

    def _grace(self, request: TerminateJobRequest) -> float:
        return grace_seconds(request, self._input.stop_duration)

    def _log_stop(self) -> TerminateJobRequest:
        request = self._control.terminate
        assert request is not None  # only called once a stop has been asked for
        self._log(*job.stop_event(request))
        return request

    def _fail_from(self, err: ActivityError, reason: JobTerminationReason) -> None:
        if isinstance(err.cause, CancelledError):
            raise Stopped() from err
        # An activity that fails for a reason says so by its ApplicationError type; the note is its
        # message alone (str() would prefix the type, which the reason already is).
        cause = err.cause
        if isinstance(cause, ApplicationError):
            reason = job.reason_for_failure(cause.type, reason)
        self._log(*fatal(reason, cause.message if isinstance(cause, FailureError) else str(err)))

    async def _clean_up(self, inp: JobInput) -> JobEnding:
        """Stop and remove the task, free the capacity, then the finished status (docs/jobs.md)."""
        if self._serving is not None:
            await self._serving.unregister()
        instance = self._control.instance
        if self._state.allocated and instance is not None:
            if self._control.lost:
                note = job.lost_task_note(instance, self._control.terminate)
                self._log("exception", type="free", severity=1, note=note)
            else:
                problem = await self._agent.remove_task(
                    instance, local=patches.taken(_SHORT_HISTORY, self._revised)
                )
                if problem is None:
                    self._log("release", ranks="all", final=True)
                else:
                    self._log("exception", type="free", severity=1, note=problem)
            await self._detach_volumes(inp)
            self._log("free")
        # The capacity goes back with the last word below.
        releasing = asyncio.ensure_future(self._release(inp)) if self._control.must_release() else None
        reason = self._state.termination_reason
        assert reason is not None  # every way here logged a fatal exception or the job's finish
        self._log("clean", status=reason.to_status(), reason=reason)
        self._news.publish(last=True)
        await self._news.published()
        if releasing is not None:
            await releasing
        state = self._state
        return JobEnding(
            termination_reason=reason,
            termination_message=last_note(state),
            exit_status=state.exit_status,
            last_word=await self._news.last_word(),  # the last step: nothing comes between it and the end
        )

    async def _detach_volumes(self, inp: JobInput) -> None:
        """The job's named volumes freed once its process has ended: retried until it succeeds, the job
        TERMINATING meanwhile, and its capacity released only after (docs/volumes.md#detach)."""
        request = detach_request(inp, self._id)
        if request is not None:
            await workflow.execute_activity(
                activity_stubs.detach_volumes,
                request,
                start_to_close_timeout=_STORE_STEP_TIMEOUT,
                retry_policy=retry_policies.DETACH,
            )

    async def _release(self, inp: JobInput) -> None:
        """The capacity back to the fleet, once the task is gone (a fleet deleted meanwhile needs nothing)."""
        release = ReleaseJob(job_id=self._id)
        await signals.send_one(
            inp.fleet_workflow_id, FLEET_RELEASE, release, "release", by_revision=self._revised
        )

    def _note(self, **memo: str) -> None:
        self._log("memo", **memo)
        self._news.publish()

    def _event(self, name: str, context: dict[str, Any] | None = None, /, **more: Any) -> Event:
        merged = {**(context or {}), **more}
        return Event(
            timestamp=workflow.now().timestamp(),
            name=name,
            context={k: v for k, v in merged.items() if v is not None},
        )

    def _log(self, name: str, context: dict[str, Any] | None = None, /, **more: Any) -> None:
        event = self._event(name, context, **more)
        self._state = apply_job_event(self._state, event)
        self._events.append(event)
        show_job(self._state)
