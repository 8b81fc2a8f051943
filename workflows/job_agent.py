"""The activities a JobWorkflow runs against its instance's agent, each one given up when the run asks the
job to stop (docs/jobs.md). What to do when is JobWorkflow's; these only carry it out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from core.jobs.phases import JobControl
    from core.wire.job_messages import TerminateJobRequest
    from core.wire.messages import JobOutcome, StopTask, TaskRef, WatchJob
    from workflows import activity_stubs, retry_policies
    from workflows.handles import abandon

ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")

_STEP_HEARTBEAT = timedelta(seconds=10)
# The watch long-polls its agent up to 5 s per request; the SDK sends heartbeats at most every 0.8 x this,
# so a longer timeout means fewer of them for every running job, at the cost of noticing a dead worker later.
_WATCH_HEARTBEAT = timedelta(seconds=20)


class Stopped(Exception):
    """The run asked the job to stop while a step was in flight."""


class JobAgent:
    """One job submission's calls to its agent; `control` reads the job's JobControl as it is now."""

    def __init__(self, job_id: str, control: Callable[[], JobControl]) -> None:
        self._id = job_id
        self._control = control

    async def step(
        self, activity: Callable[[ArgT], Awaitable[ResultT]], arg: ArgT, *, timeout: timedelta
    ) -> ResultT:
        """Run an activity (one of workflows/activity_stubs.py) unless the run asks this job to stop first
        (then cancel it and raise Stopped)."""
        if self._control().terminate is not None:
            raise Stopped()
        # Cancelling waits for the attempt in flight to end, so the clean-up that follows never races
        # an allocation or a task submission that is still landing on the agent; the steps heartbeat,
        # so that wait is short even if their worker died.
        handle = workflow.start_activity(
            activity,
            arg,
            start_to_close_timeout=timeout,
            retry_policy=retry_policies.QUICK,
            heartbeat_timeout=_STEP_HEARTBEAT,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        await self.until_stopped_or(handle)
        if handle.done():
            return handle.result()
        if self._control().lost:  # nothing of the step can land on a lost instance: no need to wait
            abandon(handle)
        else:
            handle.cancel()
            with contextlib.suppress(ActivityError, CancelledError):
                await handle
        raise Stopped()

    def watch(self, instance: str) -> workflow.ActivityHandle[JobOutcome]:
        """Follow the job on its agent until its process has ended (logs are stored as they come)."""
        return workflow.start_activity(
            activity_stubs.watch_job,
            WatchJob(job_submission_id=self._id, instance_name=instance),
            start_to_close_timeout=timedelta(days=365),
            heartbeat_timeout=_WATCH_HEARTBEAT,
            retry_policy=retry_policies.QUICK,
        )

    async def until_stopped_or(self, handle: asyncio.Future[Any]) -> None:
        """Until the activity is done or the run asks the job to stop, whichever comes first."""
        stop_requested = asyncio.ensure_future(
            workflow.wait_condition(lambda: self._control().terminate is not None)
        )
        await workflow.wait([handle, stop_requested], return_when=asyncio.FIRST_COMPLETED)
        if handle.done():
            stop_requested.cancel()

    async def stop_task(self, instance: str, request: TerminateJobRequest, grace: float) -> None:
        """Ask the agent to stop the job: SIGTERM, then SIGKILL once the grace period is over."""
        with contextlib.suppress(ActivityError):  # if the agent is gone, the watch says so
            await workflow.execute_activity(
                activity_stubs.stop_task,
                StopTask(
                    job_submission_id=self._id,
                    instance_name=instance,
                    reason=request.reason,
                    message=request.message,
                    timeout=grace,
                ),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=retry_policies.FEW_TRIES,
            )

    async def remove_task(self, instance: str, *, local: bool) -> str | None:
        """Remove the ended task from its agent; why it could not be, if it could not. `local`: as a local
        activity, whose history is one marker, not an activity and the workflow task it wakes
        (docs/jobs.md#a-shorter-history). It writes nothing a redone workflow task could log otherwise."""
        ref = TaskRef(job_submission_id=self._id, instance_name=instance)
        timeout, policy = timedelta(seconds=30), retry_policies.REMOVE
        try:
            if local:
                await workflow.execute_local_activity(
                    activity_stubs.release_task, ref, start_to_close_timeout=timeout, retry_policy=policy
                )
            else:
                await workflow.execute_activity(
                    activity_stubs.release_task, ref, start_to_close_timeout=timeout, retry_policy=policy
                )
        except ActivityError as err:
            return f"could not remove the task from {instance}: {err.cause or err}"
        return None
