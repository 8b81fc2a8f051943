"""The messages of the run's workflows: PipelineWorkflow's and CycleWorkflow's inputs, what clients and
other runs send them (stop, deploy, priority, watch) and get back from them, and what a run tells the runs
that wait for it.

One pydantic model in, one out (docs/README.md); the activities' own messages are in core.wire.messages.
RunWorkflow's input and description hold the run's own state (its machine, its state): they are
core.runs.workflow_messages'.
"""

from __future__ import annotations

from pydantic import Field

from core.configuration import RunConfiguration, TaskConfiguration
from core.configuration.specs import DependencyCondition
from core.status import RunStatus, RunTerminationReason
from core.wire.base import Message


class PipelineInput(Message):
    """A pipeline (docs/pipelines.md): its tasks, each run in turn as a RunWorkflow of its own."""

    run_id: str
    project: str
    run_name: str
    user: str
    tasks: list[TaskConfiguration]
    fleets: list[str]  # each task's fleet, decided at submission
    volume_instances: dict[str, str] = Field(default_factory=dict)  # the tasks' (RunInput.volume_instances)
    code_hash: str | None = None
    repo_id: str = ""  # the code's name, for the job's FERRY_REPO_ID (activities.code.repo_id)
    submitted_at: float
    authorized_keys: list[str] = Field(default_factory=list)  # each task's (RunInput.authorized_keys)


# --- what a run tells the runs that wait for it (docs/dependencies.md) ------------------------------------


class DependencyTarget(Message):
    """A dependency as submission resolved it: the latest run of that name (run_id None: there is none)."""

    run_name: str
    condition: DependencyCondition
    run_id: str | None = None
    workflow_id: str | None = None  # the RunWorkflow to ask for news

    def description(self) -> str:
        """As the eventlog names it (its `description`, docs/dependencies.md#waiting): NAME:condition."""
        return f"{self.run_name}:{self.condition.value}"


class RunNews(Message):
    """A run's status, as it tells those that wait for it."""

    run_id: str
    status: RunStatus
    termination_reason: RunTerminationReason | None = None
    started: bool = False  # it has been RUNNING (in any cycle or retry)


class WatchRequest(Message):
    """A run asks a run it waits for to tell it its status (`RunWorkflow.watch`, docs/dependencies.md)."""

    run_id: str  # the run waited for: a newer run of the same name is not it
    watcher_workflow_id: str


class CycleTrigger(Message):
    """A scheduled run's schedule fired: its cycle workflow (workflows/cycle.py) tells the run."""

    workflow_id: str  # the cycle workflow's, told when the cycle is over
    scheduled_at: float


class CycleDone(Message):
    outcome: str


class CycleInput(Message):
    run_workflow_id: str


class StopRequest(Message):
    abort: bool = False
    by: str | None = None  # who asked: the API's caller, recorded in the run's eventlog (docs/teams.md)


class SetPriority(Message):
    """A run's new priority (0-100): its waiting jobs move in their fleet's queue, later ones inherit it."""

    priority: int = Field(ge=0, le=100)


class DeployRequest(Message):
    """A service's or a scheduled run's configuration re-applied in place (`ferry apply` of a changed
    file)."""

    configuration: RunConfiguration
    by: str | None = None  # who re-applied it: the API's caller, recorded with the `deploy` event


class DeployReply(Message):
    deployment: int  # the deployment the run now rolls to (unchanged if nothing changed or refused)
    changed: list[str] = Field(default_factory=list)
    refused: str | None = None  # why the run cannot take it in place (then nothing changed)
    # A scheduled run's cycle in progress ends with its configuration; the next cycles run the new one.
    after_cycle: int | None = None


class StopReply(Message):
    status: RunStatus
    termination_reason: RunTerminationReason | None = None
    stuck: str | None = None  # a stuck run stopped from outside: which workflow was stuck, and why


class RunResult(Message):
    status: RunStatus
    termination_reason: RunTerminationReason | None
