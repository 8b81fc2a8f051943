"""The messages of the activities: one pydantic model in, one out (docs/README.md), each a
`core.wire.base.Message`.

The store's writes (a run's and a job's news, a pipeline's task), a run's watch, a scheduled run's Temporal
Schedule, and the calls to a job's agent (prepare, start, watch, stop, the SSH way in). The workflows' own
messages are in core.wire.run_messages and core.wire.job_messages, their ids in core.wire.workflow_ids.
Payloads stay small: logs and code travel through the store, referenced by job submission id and hash.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from core.configuration import TaskConfiguration
from core.configuration.specs import UtilizationPolicy
from core.eventlog import Event
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from core.wire.agent_api import ContainerSpec, JobSpec, Resources, TaskMetrics, TaskNetwork
from core.wire.base import Message
from core.wire.run_messages import RunNews
from core.wire.volumes import JobVolume

# --- the store -----------------------------------------------------------------------------------------


class RecordJob(Message):
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


class RecordRun(Message):
    """Flush a run's new events and current status to the store."""

    run_id: str
    status: RunStatus
    termination_reason: RunTerminationReason | None = None
    status_message: str | None = None
    start_seq: int
    events: list[Event]
    finished_at: float | None = None
    jobs: list[RecordJob] = []  # the jobs' news heard since the last flush, stored in the same transaction
    # The run's configuration (JSON), when re-applied in place since the last flush; its priority, when set.
    configuration: str | None = None
    priority: int | None = None
    # Written from the run's workflow task (its last write, a local activity): its place among the run's
    # writes, the history's length then (docs/runs.md#the-store). None: a regular activity's.
    order: int | None = None


class RecordPipelineTask(Message):
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


# --- runs' watches and schedules ---------------------------------------------------------------------


class WatchRunRequest(Message):
    """The WATCH_RUN activity's input: the news now if the run has finished, else a watch sent."""

    run_id: str
    workflow_id: str
    watcher_workflow_id: str


class WatchReply(Message):
    news: RunNews | None = None  # None: the run is active, and tells the watcher itself


class CreateSchedule(Message):
    """The Temporal Schedule of a scheduled run (activities/schedules.py)."""

    schedule_id: str
    run_workflow_id: str
    run_name: str
    project: str
    user: str
    run_type: str
    crons: list[str]


class UpdateScheduleRequest(Message):
    """A scheduled run's new cron expressions, for its Temporal Schedule (activities/schedules.py)."""

    schedule_id: str
    crons: list[str]


# --- a job's agent -------------------------------------------------------------------------------------


class TaskRef(Message):
    job_submission_id: str
    instance_name: str


class PrepareTask(Message):
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
    # The job's workflow, told of the task's end by its instance's watch (docs/jobs.md#the-instance-watch);
    # None for a job that watches its task itself (a workflow begun before the instance watch).
    owner: str | None = None


class StartJobRequest(Message):
    job_submission_id: str
    instance_name: str
    spec: JobSpec
    code_hash: str | None = None
    api_access: bool | None = None  # JobInput.api_access: None, look it up in the store


class PrepareAndStart(Message):
    """PREPARE_TASK then START_JOB in one activity (docs/jobs.md#one-step-start)."""

    prepare: PrepareTask
    start: StartJobRequest


class WatchJob(Message):
    job_submission_id: str
    instance_name: str
    unreachable_after: float = 10.0  # seconds without an answer before the instance counts as lost


# The signal an instance's watch sends a job's workflow when its task has ended, its log stored; a JobOutcome.
TASK_ENDED = "task_ended"


class WatchInstance(Message):
    """One instance's watch (docs/jobs.md#the-instance-watch): the tasks of the workflows whose ids start
    with `owners` are followed, their logs stored and their ends told to their workflows."""

    instance_name: str
    owners: str
    unreachable_after: float = 10.0  # seconds without an answer before its jobs count as lost


class JobOutcome(Message):
    """How a job's process ended, as its agent (or its silence) tells. `task_id`: the agent's task it is
    about, from an instance's watch; a job hears only its own (docs/jobs.md#the-instance-watch)."""

    termination_reason: JobTerminationReason
    termination_message: str | None = None
    exit_status: int | None = None
    task_id: str | None = None


class SSHEndpointRequest(Message):
    job_submission_id: str
    instance_name: str


class SSHEndpoint(Message):
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


class MetricsRequest(Message):
    """`ferry metrics`: the running jobs whose agents are asked what they use now (docs/jobs.md#metrics)."""

    tasks: list[TaskRef]


class JobMetrics(Message):
    job_submission_id: str
    metrics: TaskMetrics | None = None
    unavailable: str | None = None  # why there are none: the job no longer runs, its agent is unreachable


class MetricsReply(Message):
    jobs: list[JobMetrics]


class GpuSample(Message):
    """One reading of a job's GPUs for its utilization_policy: when (the worker's clock, seconds) and each
    GPU's utilization in percent by its host index, None where nvidia-smi said N/A."""

    at: float
    utilization: dict[int, float | None]


class UtilizationNewsKind(StrEnum):
    BELOW = "below"  # a GPU fell below the threshold
    RECOVERED = "recovered"  # none is below any more
    BREACHED = "breached"  # one has been below for the whole window: the job is to stop
    NO_GPUS = "no_gpus"  # the job has none: the policy does not apply


class WatchUtilization(Message):
    """`watch_utilization`: sample the job's GPUs until there is news beyond `low`, what the job's workflow
    last knew (docs/jobs.md#utilization-policy); `samples` carries the window from one call to the next."""

    task: TaskRef
    policy: UtilizationPolicy
    low: bool = False
    samples: list[GpuSample] = Field(default_factory=list)


class UtilizationNews(Message):
    kind: UtilizationNewsKind
    note: str
    samples: list[GpuSample] = Field(default_factory=list)


class StopTask(Message):
    job_submission_id: str
    instance_name: str
    reason: JobTerminationReason
    message: str | None = None
    timeout: float  # seconds between SIGTERM and SIGKILL; 0 aborts


# --- signals sent by a local activity (workflows/signals.py) ----------------------------------------


class Signal(Message):
    """One signal to another workflow: its argument as the JSON its handler's type reads, and the id that
    makes it once only (Temporal drops a second signal with the same request id: a redone workflow task
    or a retried local activity sends it again)."""

    workflow_id: str
    signal: str
    arg: dict[str, Any] | None = None
    request_id: str


class SendSignals(Message):
    signals: list[Signal]
