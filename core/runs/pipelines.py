"""A pipeline's run (docs/pipelines.md): its tasks one after another, each a run of its own.

The pipeline's eventlog is a run's (core.runs.state_machine), with `task-start {task, of, run_id}` and
`task-end {task, status, reason}`: its status follows the running task's (SUBMITTED, PENDING,
PROVISIONING, RUNNING), a task that ends DONE starts the next, and the pipeline ends with the first task
that does not end DONE (its reason is the pipeline's), or DONE after the last. A stop stops the running
task and starts no other. PipelineWorkflow carries these decisions out.
"""

from __future__ import annotations

from typing import Any

from core.eventlog import Event
from core.runs.machine import new_event
from core.runs.state_machine import RunState, apply_run_event
from core.status import RunStatus, RunTerminationReason
from core.wire.run_messages import RunNews

# The statuses of a task the pipeline shows as its own; a task's TERMINATING is not the pipeline's yet.
MIRRORED = frozenset({RunStatus.SUBMITTED, RunStatus.PENDING, RunStatus.PROVISIONING, RunStatus.RUNNING})


def task_run_id(pipeline_run_id: str, task: int) -> str:
    return f"{pipeline_run_id}-t{task}"


def task_workflow_id(pipeline_workflow_id: str, task: int) -> str:
    return f"{pipeline_workflow_id}/task-{task}"


class PipelineLog:
    """The events one step of a pipeline logs, each folded into its state at once."""

    def __init__(self, state: RunState, now: float) -> None:
        self.state = state
        self.now = now
        self.events: list[Event] = []

    def log(self, name: str, **context: Any) -> None:
        event = new_event(self.now, name, **context)
        self.state = apply_run_event(self.state, event)
        self.events.append(event)


def start_task(log: PipelineLog, task: int, tasks: int, run_id: str) -> None:
    log.log("task-start", task=task, of=tasks, run_id=run_id)
    if log.state.status != RunStatus.SUBMITTED:
        log.log("status", status=RunStatus.SUBMITTED)


def mirror(log: PipelineLog, news: RunNews) -> None:
    """The running task's news: its status becomes the pipeline's (news of an earlier task is late)."""
    if news.run_id != log.state.task_run_id or news.status not in MIRRORED:
        return
    current = log.state.status
    if news.status != current and current.is_active() and current != RunStatus.TERMINATING:
        log.log("status", status=news.status)


def task_ended(
    log: PipelineLog, status: RunStatus, reason: RunTerminationReason | None, stopping: bool
) -> int | None:
    """The running task has ended: the next task's number, or None once the pipeline has ended too."""
    state = log.state
    log.log("task-end", task=state.task, status=status, reason=reason)
    if status == RunStatus.DONE and state.task < state.tasks and not stopping:
        return state.task + 1
    if status == RunStatus.DONE and not stopping:
        final = RunTerminationReason.ALL_JOBS_DONE
    elif stopping and (reason is None or reason.is_by_user or status == RunStatus.DONE):
        final = RunTerminationReason.STOPPED_BY_USER
    else:
        final = reason or RunTerminationReason.JOB_FAILED
    if log.state.status != RunStatus.TERMINATING:
        log.log("status", status=RunStatus.TERMINATING, reason=final)
    log.log("clean", status=final.to_status(), reason=final)
    return None


def stop(log: PipelineLog, abort: bool) -> None:
    """The user stops the pipeline: TERMINATING with the user's reason; the running task is told."""
    if log.state.status.is_active() and log.state.status != RunStatus.TERMINATING:
        reason = RunTerminationReason.ABORTED_BY_USER if abort else RunTerminationReason.STOPPED_BY_USER
        log.log("status", status=RunStatus.TERMINATING, reason=reason)
