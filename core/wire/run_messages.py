"""The messages of the run's workflows: RunWorkflow's, PipelineWorkflow's and CycleWorkflow's inputs, and
what clients and other runs send them (stop, deploy, priority, watch) and get back from them.

One pydantic model in, one out (docs/README.md); the activities' own messages are in core.wire.messages.
"""

from __future__ import annotations

from pydantic import Field

from core.configuration import RunConfiguration, TaskConfiguration
from core.eventlog import Event
from core.runs.machine import RunMachine
from core.runs.state_machine import RunState
from core.runs.watching import DependencyTarget
from core.status import RunStatus, RunTerminationReason
from core.wire.base import Message
from core.wire.workflow_ids import LOCAL_FLEET


class RunCarry(Message):
    """What a continued-as-new RunWorkflow takes over from its previous execution."""

    machine: RunMachine
    next_seq: int  # the run eventlog's next sequence number (earlier events are in the store)
    watchers: list[str] = Field(default_factory=list)  # the runs waiting for this one (workflow ids)


class RunInput(Message):
    run_id: str  # unique per submission; run names are reused once a run has finished
    project: str
    run_name: str
    user: str
    configuration: RunConfiguration
    code_hash: str | None = None
    repo_id: str = ""  # the code's name, for the job's FERRY_REPO_ID (activities.code.repo_id)
    submitted_at: float
    fleet: str = LOCAL_FLEET  # where its jobs are placed, decided once at submission
    carry: RunCarry | None = None
    dependencies: list[DependencyTarget] = Field(default_factory=list)  # resolved at submission
    volume_instances: dict[str, str] = Field(default_factory=dict)  # named volume -> its instance, likewise
    # The user's SSH public keys: they open the agents' SSH servers into its jobs (docs/attach.md).
    authorized_keys: list[str] = Field(default_factory=list)
    # For tests: continue as new after every step, to show that nothing of the run is lost across it.
    continue_as_new_each_step: bool = False


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


class SetPriority(Message):
    """A run's new priority (0-100): its waiting jobs move in their fleet's queue, later ones inherit it."""

    priority: int = Field(ge=0, le=100)


class DeployRequest(Message):
    """A service's or a scheduled run's configuration re-applied in place (`ferry apply` of a changed
    file)."""

    configuration: RunConfiguration


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


class RunDescription(Message):
    run_id: str
    state: RunState
    events: list[Event]  # this execution's; after a continue-as-new, earlier ones are in the store
    first_seq: int


class RunResult(Message):
    status: RunStatus
    termination_reason: RunTerminationReason | None


RunCarry.model_rebuild()
