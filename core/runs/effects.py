"""What one step of a run's lifecycle asks its workflow to do: effects as data (docs/runs.md).

`core.runs.lifecycle.advance` decides; RunWorkflow carries these out, in this order: start the new job
submissions (node 0 of a replica last: it enqueues the whole replica), then send the signals. Waking up
for a pending backoff is not an effect but the machine's `wake_at`: the workflow's wait always honours it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from core.status import JobTerminationReason


class _Effect(BaseModel):
    model_config = ConfigDict(frozen=True)


class StartJob(_Effect):
    """Start a JobWorkflow for a submission the step logged (`job-submit`)."""

    replica_num: int
    job_num: int
    submission_num: int


class TerminateJob(_Effect):
    """Tell a running JobWorkflow to terminate; a job that has already ended ignores it."""

    replica_num: int
    job_num: int
    submission_num: int
    reason: JobTerminationReason
    message: str | None = None
    abort: bool = False


class PeersStarted(_Effect):
    """Tell a job that waits for others of its replica to start (`startup_order`) that they have: it may
    start now (core.runs.startup)."""

    replica_num: int
    job_num: int
    submission_num: int


class SetQueuedPriority(_Effect):
    """Move the run's replicas still waiting in their fleet's queue to a new priority."""

    request_ids: list[str]
    priority: int


class EndCycle(_Effect):
    """Tell a scheduled run's cycle workflow that its cycle is over (or was skipped): the schedule may fire
    again (its overlap policy skips a trigger while a cycle workflow is open)."""

    workflow_id: str
    outcome: str  # how the cycle ended, e.g. "done", "failed", "skipped: cycle 3 is running"


class UpdateSchedule(_Effect):
    """A scheduled run re-applied with another cron: its Temporal Schedule takes it in place
    (docs/schedules.md#changing-a-scheduled-run)."""

    crons: list[str]


class WatchRun(_Effect):
    """Ask a run this one waits for to tell it its status, now and at every change (docs/dependencies.md)."""

    run_id: str
    workflow_id: str


Effect = StartJob | TerminateJob | PeersStarted | SetQueuedPriority | EndCycle | UpdateSchedule | WatchRun
