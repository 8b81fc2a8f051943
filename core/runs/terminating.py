"""STEP 4 and 5, a terminating run (docs/runs.md#step-4-terminating): its jobs told to terminate, then
the finished status once every job has finished.

A stop or abort from the user makes an active run TERMINATING (a PENDING one is not resubmitted); so does
a non-retryable failure or the end of the work (`core.runs.active`). Every still-active job is told the
run's reason (`RunTerminationReason.to_job_termination_reason`), once, and again if an abort follows a
stop. Only this phase gives the run its finished status, by `clean`.
"""

from __future__ import annotations

from core.runs import cycles
from core.runs.machine import StepBuilder, StopKind, actor
from core.status import RunStatus, RunTerminationReason


def stop_reason(abort: bool) -> RunTerminationReason:
    return RunTerminationReason.ABORTED_BY_USER if abort else RunTerminationReason.STOPPED_BY_USER


def stop_pending(b: StepBuilder) -> bool:
    """The user asked to stop a run that is not terminating yet."""
    status = b.state.status
    return b.stop is not None and status != RunStatus.TERMINATING and not status.is_finished()


def begin_stop(b: StepBuilder) -> None:
    assert b.stop is not None
    b.retry_at = None  # a PENDING run is not resubmitted
    reason = stop_reason(b.stop == StopKind.ABORT)
    b.log("status", status=RunStatus.TERMINATING, reason=reason, **actor(b.stop_by))


def applies(b: StepBuilder) -> bool:
    return b.state.status == RunStatus.TERMINATING


def terminate_and_clean(b: StepBuilder) -> None:
    """STEP 4: every active job told to terminate; STEP 5: once all have finished, the final status."""
    state = b.state
    reason = state.termination_reason
    assert reason is not None  # a TERMINATING run always has one (core.runs.state_machine)
    abort = b.stop == StopKind.ABORT
    for job in state.jobs:
        if job.status.is_active():
            key = (job.replica_num, job.job_num, job.submission_num)
            b.tell_once(key, reason.to_job_termination_reason(), abort)
    if all(j.status.is_finished() for j in state.jobs):
        if cycles.returns_to_pending(b, reason):
            cycles.end(
                b, reason
            )  # a scheduled run's cycle is over: it waits for the next (docs/schedules.md)
            return
        cycles.release(b, reason)
        b.log("clean", status=reason.to_status(), reason=reason)
