"""The messages of JobWorkflow: its input, what its run sends it and hears from it, and its exchange with
its fleet's scheduler (the replica's placement request, and the placement, refusal or queue position).

One pydantic model in, one out (docs/README.md); the activities' own messages are in core.wire.messages.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from core.configuration.resources import ResourcesSpec
from core.configuration.specs import InstanceSpec, UtilizationPolicy
from core.eventlog import Event
from core.status import JobStatus, JobTerminationReason
from core.wire.agent_api import ClusterInfo, ContainerSpec, JobSpec, Resources
from core.wire.base import Frozen, Message
from core.wire.messages import JobOutcome, RecordJob
from core.wire.services import ServiceJob
from core.wire.volumes import JobVolume


class NodeRequest(Frozen):
    """One node of a replica's placement request: its job and what it needs."""

    job_id: str
    resources: Resources = Field(default_factory=Resources, description="the amounts to reserve")
    spec: ResourcesSpec | None = Field(
        default=None, description="checked against `hardware` when both are set"
    )
    instance: str | None = Field(
        default=None, description="this instance only: the one its volumes are on (docs/volumes.md)"
    )
    container: bool = Field(
        default=False, description="runs in a container: only on an instance with an engine"
    )
    privileged: bool = Field(
        default=False,
        description="`privileged: true` on the host (not in a container): only where the agent runs as root",
    )
    picks: list[InstanceSpec] = Field(
        default_factory=list, description="the run's `instances`: one of these only (none: any)"
    )


class PlacementRequest(Frozen):
    """A replica's nodes, placed whole or not at all by its fleet (docs/fleets.md)."""

    request_id: str = Field(description="the gang: run id, replica and submission")
    priority: int = Field(default=0, ge=0, le=100)
    seq: int = Field(default=0, ge=0, description="submission order, set by enqueue")
    nodes: list[NodeRequest] = Field(min_length=1)
    fleets: list[str] | None = Field(default=None, description="instances of these fleets only")
    spread: bool = Field(default=True, description="every node on a different instance")

    @model_validator(mode="after")
    def _distinct_jobs(self) -> PlacementRequest:
        if len({node.job_id for node in self.nodes}) != len(self.nodes):
            raise ValueError("the nodes of a request need distinct job ids")
        return self


class Enqueue(Message):
    """A replica's placement request for its fleet, and the JobWorkflow of each of its nodes' jobs."""

    request: PlacementRequest
    notify: dict[str, str]  # job id (the job submission id) -> its JobWorkflow's id


class JobInput(Message):
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
    # A task's node groups: each group's node count, where `${{ groups[i].nodes[j].IP_ADDRESS }}` points.
    node_groups: list[int] = Field(default_factory=list)
    # The jobs of its replica that must run before it starts (`startup_order`, core.runs.startup).
    waits_for: list[int] = Field(default_factory=list)
    # dstack's `utilization_policy`: its GPUs sampled while it runs (core.runs.utilization).
    utilization_policy: UtilizationPolicy | None = None
    # Whether its run calls Ferry's API (`dstack: true`): a job that does gets a token at its start. None:
    # an input from before this was told, which the start looks up in the run's stored configuration.
    api_access: bool | None = None
    # Its run's workflow revision (core.wire.revisions): since LAST_WORDS its run hears its last word from
    # this workflow's result (JobEnding), until the run asks otherwise (docs/jobs.md#the-last-word).
    revision: int = 0


class TerminateJobRequest(Message):
    """The run's request that a job stop: the reason it will end with, and whether to skip the grace."""

    reason: JobTerminationReason
    abort: bool = False
    message: str | None = None
    # The instance is gone for good (its Slurm allocation ended: docs/backends.md): no stop to send, no task
    # to remove, whatever the reason.
    instance_gone: bool = False


class JobUpdate(Message):
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


class JobEnding(JobOutcome):
    """A JobWorkflow's result (a failed job's failure carries it as its details): how the job ended, and
    its last word for its run when the run hears it here (since the revision LAST_WORDS,
    docs/jobs.md#the-last-word)."""

    last_word: JobUpdate | None = None


class JobDescription(Message):
    job_submission_id: str
    events: list[Event]


class Placement(Message):
    """Where a job runs: the instance (its agent is found by name in the worker) and the cluster's IPs."""

    instance_name: str
    cluster: ClusterInfo
    shared: bool = False  # the instance may run other jobs beside this one (docs/containers.md#networks)
    # Its fleet watches the instance and tells the job when its task ends (docs/jobs.md#the-instance-watch);
    # False in placements of fleets begun before the instance watch: the job then watches its task itself.
    watched: bool = False
    env: dict[str, str] = Field(default_factory=dict)  # the fleet's `env` (docs/fleets.md#env)


class PlacementRefused(Message):
    """The fleet can never place the job's replica: the job fails with FAILED_TO_START_DUE_TO_NO_CAPACITY."""

    reason: str


class Queued(Message):
    """The job's replica waits in its fleet's queue for capacity."""

    position: int
