"""The pydantic messages the workflows and activities exchange: one model in, one out (docs/README.md).

Payloads stay small: logs and code travel through the store, referenced by job submission id and hash.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from core.configuration import RunConfiguration, TaskConfiguration
from core.eventlog import Event
from core.fleets.placement import PlacementRequest
from core.runs.machine import RunMachine
from core.runs.state_machine import RunState
from core.runs.watching import DependencyTarget, RunNews
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from core.wire.agent_api import ClusterInfo, ContainerSpec, JobSpec, Resources, TaskNetwork
from core.wire.services import ServiceJob
from core.wire.volumes import JobVolume


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True)


def run_workflow_id(project: str, run_name: str) -> str:
    return f"ferry/{project}/{run_name}"


def job_workflow_id(run_workflow: str, replica_num: int, job_num: int, submission_num: int) -> str:
    return f"{run_workflow}/r{replica_num}/j{job_num}/s{submission_num}"


def job_submission_id(run_id: str, replica_num: int, job_num: int, submission_num: int) -> str:
    """The store's id of a job submission, also its task id on the agent (no slashes allowed there)."""
    return f"{run_id}-r{replica_num}-j{job_num}-s{submission_num}"


def placement_request_id(run_id: str, replica_num: int, submission_num: int) -> str:
    """A replica's placement request (its gang) at one submission, as its fleet's scheduler knows it."""
    return f"{run_id}-r{replica_num}-s{submission_num}"


# The fleet of this machine's agent: every project has one, started on demand, with one instance.
LOCAL_FLEET = "local"
LOCAL_INSTANCE = "local"  # the local fleet's one instance: this machine (the worker's own agent)


def fleet_workflow_id(project: str, fleet: str) -> str:
    """The FleetWorkflow (the fleet's scheduler); run names never hold a slash, so no run clashes."""
    return f"ferry/{project}/fleet/{fleet}"


# --- RunWorkflow -------------------------------------------------------------------------------------


class RunCarry(_Message):
    """What a continued-as-new RunWorkflow takes over from its previous execution."""

    machine: RunMachine
    next_seq: int  # the run eventlog's next sequence number (earlier events are in the store)
    watchers: list[str] = Field(default_factory=list)  # the runs waiting for this one (workflow ids)


class RunInput(_Message):
    run_id: str  # unique per submission; run names are reused once a run has finished
    project: str
    run_name: str
    user: str
    configuration: RunConfiguration
    code_hash: str | None = None
    submitted_at: float
    fleet: str = LOCAL_FLEET  # where its jobs are placed, decided once at submission
    carry: RunCarry | None = None
    dependencies: list[DependencyTarget] = Field(default_factory=list)  # resolved at submission
    volume_instances: dict[str, str] = Field(default_factory=dict)  # named volume -> its instance, likewise
    # The user's SSH public keys: they open the agents' SSH servers into its jobs (docs/attach.md).
    authorized_keys: list[str] = Field(default_factory=list)
    # For tests: continue as new after every step, to show that nothing of the run is lost across it.
    continue_as_new_each_step: bool = False


class PipelineInput(_Message):
    """A pipeline (docs/pipelines.md): its tasks, each run in turn as a RunWorkflow of its own."""

    run_id: str
    project: str
    run_name: str
    user: str
    tasks: list[TaskConfiguration]
    fleets: list[str]  # each task's fleet, decided at submission
    volume_instances: dict[str, str] = Field(default_factory=dict)  # the tasks' (RunInput.volume_instances)
    code_hash: str | None = None
    submitted_at: float
    authorized_keys: list[str] = Field(default_factory=list)  # each task's (RunInput.authorized_keys)


class RecordPipelineTask(_Message):
    """A pipeline's task about to start: its run's record, under the pipeline's (stored once)."""

    pipeline_id: str
    task_num: int
    run_id: str
    workflow_id: str
    project: str
    run_name: str
    user: str
    configuration: TaskConfiguration
    code_hash: str | None = None
    submitted_at: float


class WatchRequest(_Message):
    """A run asks a run it waits for to tell it its status (`RunWorkflow.watch`, docs/dependencies.md)."""

    run_id: str  # the run waited for: a newer run of the same name is not it
    watcher_workflow_id: str


class WatchRun(_Message):
    """The WATCH_RUN activity's input: the news now if the run has finished, else a watch sent."""

    run_id: str
    workflow_id: str
    watcher_workflow_id: str


class WatchReply(_Message):
    news: RunNews | None = None  # None: the run is active, and tells the watcher itself


class CycleTrigger(_Message):
    """A scheduled run's schedule fired: its cycle workflow (workflows/cycle.py) tells the run."""

    workflow_id: str  # the cycle workflow's, told when the cycle is over
    scheduled_at: float


class CycleDone(_Message):
    outcome: str


class CycleInput(_Message):
    run_workflow_id: str


class CreateSchedule(_Message):
    """The Temporal Schedule of a scheduled run (activities/schedules.py)."""

    schedule_id: str
    run_workflow_id: str
    run_name: str
    project: str
    user: str
    run_type: str
    crons: list[str]


class UpdateScheduleRequest(_Message):
    """A scheduled run's new cron expressions, for its Temporal Schedule (activities/schedules.py)."""

    schedule_id: str
    crons: list[str]


def schedule_id(run_workflow_id: str, run_id: str) -> str:
    """A scheduled run's schedule: beside its workflow, named by its run id (names are reused)."""
    return f"{run_workflow_id}/schedule/{run_id}"


class StopRequest(_Message):
    abort: bool = False


class SetPriority(_Message):
    """A run's new priority (0-100): its waiting jobs move in their fleet's queue, later ones inherit it."""

    priority: int = Field(ge=0, le=100)


class DeployRequest(_Message):
    """A service's or a scheduled run's configuration re-applied in place (`ferry apply` of a changed
    file)."""

    configuration: RunConfiguration


class DeployReply(_Message):
    deployment: int  # the deployment the run now rolls to (unchanged if nothing changed or refused)
    changed: list[str] = Field(default_factory=list)
    refused: str | None = None  # why the run cannot take it in place (then nothing changed)
    # A scheduled run's cycle in progress ends with its configuration; the next cycles run the new one.
    after_cycle: int | None = None


class StopReply(_Message):
    status: RunStatus
    termination_reason: RunTerminationReason | None = None


class RunDescription(_Message):
    run_id: str
    state: RunState
    events: list[Event]  # this execution's; after a continue-as-new, earlier ones are in the store
    first_seq: int


class RunResult(_Message):
    status: RunStatus
    termination_reason: RunTerminationReason | None


# --- JobWorkflow -------------------------------------------------------------------------------------


class Enqueue(_Message):
    """A replica's placement request for its fleet, and the JobWorkflow of each of its nodes' jobs."""

    request: PlacementRequest
    notify: dict[str, str]  # job id (the job submission id) -> its JobWorkflow's id


class JobInput(_Message):
    run_id: str
    run_workflow_id: str
    project: str
    replica_num: int
    job_num: int
    submission_num: int
    nodes_num: int
    spec: JobSpec  # cluster_info is filled once the job is placed
    resources: Resources  # what the job reserves on its instance
    code_hash: str | None = None
    stop_duration: int | None  # seconds between SIGTERM and SIGKILL when stopped; None: no grace, abort
    priority: int = 0
    first_submitted_at: float
    fleet_workflow_id: str  # the scheduler that places it
    request_id: str  # its replica's placement request
    enqueue: Enqueue | None = None  # node 0 sends its replica's request; the other nodes wait for theirs
    service: ServiceJob | None = None  # a service replica: registered in the proxies once its probes pass
    authorized_keys: list[str] = Field(default_factory=list)  # who may SSH into the job (docs/attach.md)
    container: ContainerSpec | None = None  # its image, when it runs as a container (docs/containers.md)
    volumes: list[JobVolume] = Field(default_factory=list)  # docs/volumes.md


class TerminateJob(_Message):
    """The run's request that a job stop: the reason it will end with, and whether to skip the grace."""

    reason: JobTerminationReason
    abort: bool = False
    message: str | None = None


class RecordJob(_Message):
    """A job submission's new events (from `start_seq`) and current status, for the store (via its run)."""

    job_submission_id: str
    run_id: str
    replica_num: int
    job_num: int
    submission_num: int
    status: JobStatus
    termination_reason: JobTerminationReason | None = None
    termination_message: str | None = None
    exit_status: int | None = None
    instance_name: str | None = None
    submitted_at: float
    provisioned_at: float | None = None
    finished_at: float | None = None
    start_seq: int
    events: list[Event]
    status_message: str | None = None  # e.g. "waiting for capacity" while queued in its fleet


class JobUpdate(_Message):
    """A job submission's news for its run, sent as a signal at each status change: its status, and what
    the run stores for it (its eventlog is therefore part of the run's history)."""

    replica_num: int
    job_num: int
    submission_num: int
    timestamp: float
    record: RecordJob
    serving: str | None = None  # a service replica's state in the proxies, as its job last logged it

    @property
    def status(self) -> JobStatus:
        return self.record.status

    @property
    def termination_reason(self) -> JobTerminationReason | None:
        return self.record.termination_reason

    @property
    def exit_status(self) -> int | None:
        return self.record.exit_status

    @property
    def instance(self) -> str | None:
        return self.record.instance_name


class JobDescription(_Message):
    job_submission_id: str
    events: list[Event]


# --- Activities --------------------------------------------------------------------------------------


class RecordRun(_Message):
    """Flush a run's new events and current status to the store."""

    run_id: str
    status: RunStatus
    termination_reason: RunTerminationReason | None = None
    status_message: str | None = None
    start_seq: int
    events: list[Event]
    finished_at: float | None = None
    jobs: list[RecordJob] = []  # the jobs' news heard since the last flush, stored in the same transaction


class Placement(_Message):
    """Where a job runs: the instance (its agent is found by name in the worker) and the cluster's IPs."""

    instance_name: str
    cluster: ClusterInfo
    shared: bool = False  # the instance may run other jobs beside this one (docs/containers.md#networks)


class PlacementRefused(_Message):
    """The fleet can never place the job's replica: the job fails with FAILED_TO_START_DUE_TO_NO_CAPACITY."""

    reason: str


class Queued(_Message):
    """The job's replica waits in its fleet's queue for capacity."""

    position: int


class TaskRef(_Message):
    job_submission_id: str
    instance_name: str


class PrepareTask(_Message):
    job_submission_id: str
    instance_name: str
    task_name: str
    resources: Resources
    ports: list[int] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    network: TaskNetwork = "host"
    authorized_keys: list[str] = Field(default_factory=list)
    container: ContainerSpec | None = None
    volumes: list[JobVolume] = Field(default_factory=list)


class StartJob(_Message):
    job_submission_id: str
    instance_name: str
    spec: JobSpec
    code_hash: str | None = None


class WatchJob(_Message):
    job_submission_id: str
    instance_name: str
    unreachable_after: float = 10.0  # seconds without an answer before the instance counts as lost


class JobOutcome(_Message):
    """How a job's process ended, as its agent (or its silence) tells."""

    termination_reason: JobTerminationReason
    termination_message: str | None = None
    exit_status: int | None = None


class SSHEndpointRequest(_Message):
    job_submission_id: str
    instance_name: str


class SSHEndpoint(_Message):
    """Where the user's OpenSSH reaches a running job (docs/attach.md): the SSH server of its instance's
    agent, on that instance's loopback, logged in as the job's task."""

    instance_name: str = ""
    port: int | None = None
    host_key: str | None = None  # the agent's host key, an OpenSSH public key line
    user: str = ""  # the SSH user that names the job on its agent (its task id)
    refused: str | None = None  # why there is no way in (the job is not running, its agent has no SSH)
    # What `ferry ps` shows of a dev environment's inactivity, as the agent counts it (TaskInfo):
    ssh_connections: int = 0  # SSH connections into the job open now
    idle_since: float | None = None  # since when none has been open (the job's start); None: one is


class StopTask(_Message):
    job_submission_id: str
    instance_name: str
    reason: JobTerminationReason
    message: str | None = None
    timeout: float  # seconds between SIGTERM and SIGKILL; 0 aborts


RunCarry.model_rebuild()
