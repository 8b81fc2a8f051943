"""The agent's HTTP API: every request and response body, shared by the agent and its client.

The agent plays dstack's two roles (docs/jobs.md): the shim role works with *tasks* (an id, resources, ports,
volumes), the runner role runs one *job* per task (a job spec, a code archive, commands, logs by offset).
Pure models, no I/O.
"""

from __future__ import annotations

import base64
import posixpath
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from core.compat import StrEnum
from core.status import JobStatus, JobTerminationReason
from core.wire.repo_clone import RepoClone

AGENT_SERVICE_NAME = "ferry-agent"

# Task ids name directories on the agent's host, so they keep to a safe alphabet.
TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
TaskId = Annotated[str, Field(pattern=TASK_ID_PATTERN)]

# dstack's convention: a "GB" of memory is 2**30 bytes.
BYTES_PER_GB = 2**30

CODE_HASH_PARAM = "sha256"
DEFAULT_PULL_LIMIT = 4 * 2**20
MAX_PULL_LIMIT = 32 * 2**20

# Upper bounds for what a request may carry: far beyond any real host or job, yet small enough that
# arithmetic on them (wall clock + seconds, GB * 2**30) stays finite and exact. Floats are finite too:
# JSON's 1e309 parses as inf, and inf or NaN would slip past `ge` or poison the ledger.
MAX_CPUS = 2**20
MAX_MEMORY_GB = 2**30  # an exabyte
MAX_GPUS = 2**16
MAX_SECONDS = 100 * 365 * 86400  # timeouts and durations: a century
MAX_COUNT = 2**31  # replica, job and node numbers


def _confined_path(value: str) -> str:
    """A path the agent acts on: no NUL (the OS refuses it, late), and a relative one stays inside the
    directory it is taken relative to. Any `..` is refused, not just one that escapes lexically: the
    workdir holds volume links, and `vol/..` leads to the host path's parent, not back to the workdir."""
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    if not posixpath.isabs(value) and ".." in value.split("/"):
        raise ValueError("a relative path must not contain '..': it would leave the task's directory")
    return value


ConfinedPath = Annotated[str, AfterValidator(_confined_path)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskStatus(StrEnum):
    PENDING = "pending"  # submitted; waiting for the job spec, the code and the run call
    PREPARING = "preparing"  # extracting the code, linking volumes, starting the process
    RUNNING = "running"
    TERMINATED = "terminated"


class ErrorResponse(_Model):
    detail: str


class HealthcheckResponse(_Model):
    service: str = AGENT_SERVICE_NAME
    version: str


class GpuInfo(_Model):
    index: int
    name: str
    memory_mib: int


class Resources(_Model):
    """An amount of a host's resources: what a task asks for, or what a host has or has free."""

    cpu: float = Field(
        default=0, ge=0, le=MAX_CPUS, allow_inf_nan=False, description="CPUs, may be fractional"
    )
    memory: float = Field(
        default=0, ge=0, le=MAX_MEMORY_GB, allow_inf_nan=False, description="GB (2**30 bytes)"
    )
    gpu: int = Field(default=0, ge=0, le=MAX_GPUS, description="number of GPUs")


class InstanceInfo(_Model):
    cpus: int
    memory_bytes: int
    disk_total_bytes: int
    disk_free_bytes: int
    gpus: list[GpuInfo]
    total: Resources
    free: Resources
    free_gpu_indices: list[int]
    ssh_port: int | None = Field(
        default=None, description="the agent's SSH server into its jobs, on loopback; None: it has none"
    )
    ssh_host_key: str | None = Field(default=None, description="its host key, an OpenSSH public key line")
    container_engine: str | None = Field(
        default=None, description="the container engine the agent found, e.g. `podman 4.3.1`; None: none"
    )
    cpu_arch: str | None = Field(
        default=None, description="`x86` or `arm`; None: another, or an agent of 0.1.0 (which did not say)"
    )
    shm_bytes: int | None = Field(
        default=None, ge=0, description="the size of the host's /dev/shm; None: none, or an older agent"
    )
    agent_uid: int | None = Field(
        default=None,
        ge=0,
        description="the user id the agent runs as (0: root, which may run a host job with "
        "`privileged: true`); None: an older agent",
    )


class VolumeMount(_Model):
    host_path: ConfinedPath = Field(min_length=1)
    path: ConfinedPath = Field(
        min_length=1, description="where the job sees it; relative paths are in its workdir"
    )


# host: the host's network. isolated: the task's own network (a namespace for a process job, the
# engine's bridge for a container, its ports published on ephemeral host ports: docs/containers.md).
# bridge: a shared instance's container network (docs/containers.md#networks); the agent takes it as isolated.
TaskNetwork = Literal["host", "isolated", "bridge"]


class RegistryCredentials(_Model):
    username: str
    password: str


# `python: "3.x"` without `image`: the official Python image of that version (docs/containers.md#python).
# Fully qualified, so Podman needs no short-name resolution. An agent may be given another template
# (`--python-image`, e.g. a mirror of the registry), and an image of that name already on the host is used
# without a pull.
PYTHON_IMAGE = "docker.io/library/python:{version}-slim"


def python_image(version: str, template: str = PYTHON_IMAGE) -> str:
    return template.format(version=version)


class ContainerSpec(_Model):
    """A job run as a container of `image` rather than as host processes (docs/containers.md)."""

    image: str = Field(min_length=1)
    python: str | None = Field(
        default=None, description="the `python` version `image` was chosen for; None: the user's image"
    )
    entrypoint: list[str] | None = Field(
        default=None, description="replaces the image's entrypoint; None: the image's own"
    )
    user: str | None = Field(default=None, description="user[:group] in the container; None: the image's")
    privileged: bool = False
    shm_size: int | None = Field(default=None, gt=0, description="bytes of /dev/shm; None: the engine's")
    registry_auth: RegistryCredentials | None = None
    publish_address: str = Field(
        default="127.0.0.1",
        description="the host address a bridged container's ports are published on: the one the proxy "
        "reaches (docs/containers.md#networks)",
    )


class PortBinding(_Model):
    container_port: int
    host_port: int


class TaskSubmitRequest(_Model):
    id: TaskId
    name: str = ""
    resources: Resources = Field(default_factory=Resources)
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=list)
    volumes: list[VolumeMount] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    network: TaskNetwork = Field(
        default="host",
        description="isolated: the job gets its own network namespace, so jobs that listen on the same "
        "port can share the instance; TaskInfo.address is where its ports are reached",
    )
    authorized_keys: list[str] = Field(
        default_factory=list,
        description="OpenSSH public key lines that open the agent's SSH server into this task's job, "
        "as the user named by the task's id (docs/attach.md); none: nobody gets in",
    )
    container: ContainerSpec | None = Field(
        default=None, description="run the job in a container of this image; None: as host processes"
    )
    owner: str | None = Field(
        default=None,
        max_length=512,
        description="who follows the task through the change feed (`GET /api/changes`): the id of the "
        "job's workflow, told when the task ends (docs/jobs.md#the-instance-watch); None: nobody",
    )


class TaskInfo(_Model):
    id: str
    name: str
    status: TaskStatus
    resources: Resources
    gpu_indices: list[int]
    ports: list[PortBinding]
    volumes: list[VolumeMount]
    network: TaskNetwork = "host"  # what the task got: host where the agent could not isolate it
    address: str | None = Field(
        default=None, description="the IP its ports are reached at from the instance; None: the instance's"
    )
    termination_reason: JobTerminationReason | None = None
    termination_message: str | None = None
    exit_status: int | None = None
    job_submitted: bool = False
    code_hash: str | None = None
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    ssh_connections: int = Field(default=0, description="SSH connections into the job open now")
    ssh_last_activity: float | None = Field(
        default=None, description="when an SSH connection into the job last opened or closed (wall clock)"
    )
    progress: str | None = Field(
        default=None, description="while PREPARING: how far it is, e.g. `pulling IMAGE: 2/5 layers`"
    )


class TaskList(_Model):
    tasks: list[TaskInfo]


class TaskChange(_Model):
    """A task as the change feed reports it: enough to store its new log bytes and to tell its end."""

    id: str
    owner: str | None = None
    status: TaskStatus
    log_size: int = Field(description="the size of its log when answered: pull up to it")
    termination_reason: JobTerminationReason | None = None
    termination_message: str | None = None
    exit_status: int | None = None


class ChangesResponse(_Model):
    """`GET /api/changes`: the tasks that changed since `cursor` (a new state, more log bytes), or every
    task when the agent's `epoch` is not the one asked with (it restarted) or the cursor is 0."""

    epoch: str = Field(description="this agent process's id: a cursor means something only within it")
    cursor: int = Field(description="ask with this next")
    tasks: list[TaskChange]
    removed: list[str] = Field(default_factory=list, description="tasks removed since `cursor`")


class TerminateRequest(_Model):
    reason: JobTerminationReason = JobTerminationReason.TERMINATED_BY_USER
    message: str | None = None
    timeout: float = Field(
        default=10,
        ge=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds between SIGTERM and SIGKILL; 0 aborts",
    )


class ClusterInfo(_Model):
    node_rank: int = Field(default=0, ge=0, le=MAX_COUNT)
    nodes_num: int = Field(default=1, ge=1, le=MAX_COUNT)
    master_node_ip: str = "127.0.0.1"
    node_ips: list[str] = Field(default_factory=list, description="every node's IP; [master] when empty")
    gpus_per_node: int | None = Field(
        default=None, ge=0, le=MAX_GPUS, description="the task's GPU count when None"
    )
    node_gpus: list[Annotated[int, Field(ge=0, le=MAX_GPUS)]] = Field(
        default_factory=list,
        max_length=MAX_COUNT,
        description="each node's GPU count, by rank (node groups differ); [] when not known",
    )


class JobSpec(_Model):
    run_name: str
    repo_id: str = Field(default="", max_length=256, description="the code's name (FERRY_REPO_ID)")
    replica_num: int = Field(default=0, ge=0, le=MAX_COUNT)
    job_num: int = Field(default=0, ge=0, le=MAX_COUNT)
    commands: list[str] = Field(
        default_factory=list, description="none: a container runs its image's entrypoint"
    )
    env: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(
        default_factory=dict,
        description="env values naming secrets, filled in (docs/secrets.md): the agent keeps them in memory",
    )
    working_dir: ConfinedPath | None = Field(
        default=None, description="relative to the workdir, which an absolute one replaces"
    )
    shell: str = Field(default="bash", min_length=1)
    cluster_info: ClusterInfo = Field(default_factory=ClusterInfo)
    max_duration: int | None = Field(
        default=None, gt=0, le=MAX_SECONDS, description="seconds; None for no limit"
    )
    stop_duration: int = Field(
        default=10, ge=0, le=MAX_SECONDS, description="SIGTERM to SIGKILL when max_duration ends it"
    )
    inactivity_duration: int | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        description="seconds with no SSH connection into the job after which the agent ends it "
        "(INACTIVITY_DURATION_EXCEEDED); None: never",
    )
    repos: list[RepoClone] = Field(
        default_factory=list, description="`repos` by url, cloned before the job starts (docs/runs.md#repos)"
    )


class JobStateEvent(_Model):
    state: JobStatus
    timestamp: float
    termination_reason: JobTerminationReason | None = None
    termination_message: str | None = None
    exit_status: int | None = None


class PullResponse(_Model):
    job_states: list[JobStateEvent] = Field(description="the states from the requested states_offset on")
    next_states_offset: int
    logs: str = Field(description="base64 of the log bytes from offset on")
    offset: int
    next_offset: int
    has_more: bool = Field(description="more log bytes are already there beyond next_offset")
    finished: bool = Field(description="the job has ended: once has_more is false, no byte will follow")

    def log_bytes(self) -> bytes:
        return base64.b64decode(self.logs)


class GpuUse(_Model):
    """One of a task's GPUs as `nvidia-smi` reads it now (docs/jobs.md#metrics); None where it says N/A."""

    index: int = Field(description="the host's index of the GPU")
    utilization_percent: float | None = Field(
        default=None, description="the share of the last sample period the GPU was busy"
    )
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None


class TaskMetrics(_Model):
    """A running task's use of its host, sampled when asked (`GET /api/tasks/{id}/metrics`,
    docs/jobs.md#metrics)."""

    task_id: str
    timestamp: float = Field(description="when it was sampled (wall clock)")
    source: Literal["processes", "container"] = Field(
        description="processes: read from /proc for the job's process tree; container: its engine's stats"
    )
    cpu_percent: float = Field(
        description="CPU time used over the last `window_seconds`, in percent of one core (200: two cores)"
    )
    window_seconds: float = Field(description="the interval `cpu_percent` is measured over")
    cpus: float = Field(description="the CPUs the task was granted (0: it asked for none)")
    memory_used_bytes: int = Field(
        description="resident memory summed over the job's processes, or its container's use less its "
        "inactive page cache"
    )
    memory_limit_bytes: int = Field(
        description="its container's limit; else the memory its task was granted (not enforced for a "
        "process job); else the host's"
    )
    processes: int | None = Field(default=None, description="how many processes the job has; None: unknown")
    gpus: list[GpuUse] = Field(default_factory=list, description="the task's GPUs; none on a host without")
