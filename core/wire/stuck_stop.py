"""A stuck run's stop from outside: workflows/stuck_stop.py (docs/upgrades.md#stopping-a-stuck-run)."""

from __future__ import annotations

from pydantic import Field

from core.wire.base import Message


class StuckStopInput(Message):
    run_id: str
    run_workflow_id: str
    project: str
    abort: bool  # `ferry stop -x`: its tasks killed at once, not given their stop_duration
    note: str  # which of its workflows is stuck, why and since when (cli/stuck.py)


class EndRunWorkflows(Message):
    run_workflow_id: str
    keep: str  # the stuck stop's own workflow, beside the run's
    reason: str  # what Temporal records as the termination's reason


class RunWorkflowsEnded(Message):
    ended: list[str]  # the workflows terminated
    fleets: list[str]  # the run's fleets, as its start said (a pipeline's: each task's)
    jobs: dict[str, str] = Field(default_factory=dict)  # an open JobWorkflow's job id -> its fleet workflow


class RemoveRunTasks(Message):
    run_id: str
    project: str
    fleets: list[str]
    jobs: list[str]  # job submission ids known beside the store's (their workflows were open)
    abort: bool


class RunTasksRemoved(Message):
    jobs: list[str]  # every job submission handled: the store's unfinished ones, and any with a task
    removed: list[str]  # those whose task was on an agent and is gone now
    unremoved: dict[str, str] = Field(default_factory=dict)  # job id -> why its task could not be removed


class RecordStuckStop(Message):
    run_id: str
    abort: bool
    note: str
    unremoved: dict[str, str] = Field(default_factory=dict)
