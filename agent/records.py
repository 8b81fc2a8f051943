"""A task's state on disk, under `<data_dir>/tasks/<id>/`, written atomically at every transition.

The job spec lives beside the record (mode 0600) and is read only to start the job, so that a running task
costs the agent little more than its record. Neither holds a secret's value: agent.secret_memory keeps
them in memory only (docs/secrets.md).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field, PrivateAttr

from agent import secret_memory
from core.status import JobTerminationReason
from core.wire.agent_api import (
    ContainerSpec,
    JobSpec,
    JobStateEvent,
    PortBinding,
    Resources,
    TaskInfo,
    TaskNetwork,
    TaskStatus,
    VolumeMount,
)

logger = logging.getLogger(__name__)


class TaskStop(BaseModel):
    reason: JobTerminationReason
    message: str | None = None
    requested_at: float
    kill_at: float = Field(description="when SIGKILL follows SIGTERM (wall clock, survives restarts)")
    killed: bool = False


class TaskRecord(BaseModel):
    id: str
    name: str
    status: TaskStatus
    resources: Resources
    gpu_indices: list[int]
    ports: list[int]
    volumes: list[VolumeMount]
    env: dict[str, str]
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    termination_reason: JobTerminationReason | None = None
    termination_message: str | None = None
    exit_status: int | None = None
    job_states: list[JobStateEvent] = Field(default_factory=list)
    job_submitted: bool = False
    code_hash: str | None = None
    # The job's wrapper process, which leads the job's process group, and its start time in clock
    # ticks since boot (/proc/<pid>/stat), so that a reused pid is never taken for the job.
    pid: int | None = None
    pid_start_time: int | None = None
    stop: TaskStop | None = None
    deadline: float | None = Field(default=None, description="when max_duration runs out (wall clock)")
    inactivity_duration: int | None = Field(
        default=None, description="seconds with no SSH connection after which the job is ended"
    )
    linked_paths: list[str] = Field(default_factory=list, description="volume links to remove at the end")
    # Network isolation (agent.network): what the request asked for, what the task got (host where the
    # agent could not isolate it), its namespace, and the namespace side's address, where its ports are.
    requested_network: TaskNetwork = "host"
    network: TaskNetwork = "host"
    netns: str | None = None
    address: str | None = None
    # The agent's SSH server into the job (agent/ssh_server.py): the keys that open it, and when a
    # connection last opened or closed. How many are open now is kept in memory only: none outlives the agent.
    authorized_keys: list[str] = Field(default_factory=list)
    ssh_last_activity: float | None = None
    # A container job (agent/executors/container.py): its image and settings, and the host ports the
    # engine published its ports on (bridge network); a port not in it is reached as itself.
    container: ContainerSpec | None = None
    host_ports: dict[int, int] = Field(default_factory=dict)
    progress: str | None = Field(default=None, description="while PREPARING: e.g. its image pull's")
    owner: str | None = Field(default=None, description="the job workflow the change feed tells of its end")
    _ssh_connections: int = PrivateAttr(default=0)

    @property
    def ssh_connections(self) -> int:
        return self._ssh_connections

    def note_ssh_connection(self, change: int, now: float) -> None:
        """An SSH connection into the job opened (+1) or closed (-1) at `now`."""
        self._ssh_connections = max(0, self._ssh_connections + change)
        self.ssh_last_activity = now

    def to_info(self) -> TaskInfo:
        return TaskInfo(
            id=self.id,
            name=self.name,
            status=self.status,
            resources=self.resources,
            gpu_indices=self.gpu_indices,
            ports=[
                PortBinding(container_port=port, host_port=self.host_ports.get(port, port))
                for port in self.ports
            ],
            volumes=self.volumes,
            network=self.network,
            address=self.address,
            termination_reason=self.termination_reason,
            termination_message=self.termination_message,
            exit_status=self.exit_status,
            job_submitted=self.job_submitted,
            code_hash=self.code_hash,
            created_at=self.created_at,
            started_at=self.started_at,
            finished_at=self.finished_at,
            ssh_connections=self._ssh_connections,
            ssh_last_activity=self.ssh_last_activity,
            progress=self.progress,
        )


@dataclass(frozen=True)
class TaskPaths:
    root: Path

    @property
    def record(self) -> Path:
        return self.root / "task.json"

    @property
    def job_spec(self) -> Path:
        return self.root / "job.json"

    @property
    def script(self) -> Path:
        return self.root / "job.sh"

    @property
    def log(self) -> Path:
        return self.root / "output.log"

    @property
    def exit_status(self) -> Path:
        return self.root / "exit_status"

    @property
    def wrapper_pid(self) -> Path:
        return self.root / "wrapper.pid"

    @property
    def container_id(self) -> Path:
        return self.root / "container_id"

    @property
    def code_archive(self) -> Path:
        return self.root / "code.tar.gz"

    @property
    def workdir(self) -> Path:
        return self.root / "workdir"

    @property
    def mpi_hostfile(self) -> Path:
        return self.root / "mpi_hostfile"


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write a temporary file, whole and on the disk (fdatasync), then rename it over `path`: readers, and an
    agent started after a power loss or on a full disk, find the old content or the new, never a part of
    it (docs/jobs.md#a-restarted-agent). A write that fails leaves `path` as it was, and raises."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        left = memoryview(data)
        while left:  # a write may take less than it is given (a disk filling up)
            left = left[os.write(fd, left) :]
        os.fdatasync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)


def unreadable_record(task_id: str, error: Exception, now: float) -> TaskRecord:
    """What the agent says of a task whose record it cannot read (written by hand, a disk that failed): it
    has ended, with why, so that its job ends saying so rather than wait for a task that never answers.
    Its resources are not known: it holds none."""
    why = " ".join(str(error).split())[:300]
    message = f"the agent cannot read this task's record on its host: {why}"
    reason = JobTerminationReason.EXECUTOR_ERROR
    return TaskRecord(
        id=task_id,
        name=task_id,
        status=TaskStatus.TERMINATED,
        resources=Resources(),
        gpu_indices=[],
        ports=[],
        volumes=[],
        env={},
        created_at=now,
        finished_at=now,
        termination_reason=reason,
        termination_message=message,
        job_states=[
            JobStateEvent(
                state=reason.to_status(),
                timestamp=now,
                termination_reason=reason,
                termination_message=message,
            )
        ],
    )


def save_record(paths: TaskPaths, record: TaskRecord) -> None:
    written = secret_memory.written_container(paths.root, record.container)
    if written is not record.container:
        record = record.model_copy(update={"container": written})
    write_atomically(paths.record, record.model_dump_json().encode())


def load_record(paths: TaskPaths) -> TaskRecord:
    return TaskRecord.model_validate_json(paths.record.read_bytes())


def read_record(paths: TaskPaths) -> TaskRecord:
    """The task's record; for one that cannot be read, a record that says so (`unreadable_record`)."""
    try:
        return load_record(paths)
    except (OSError, ValueError) as exc:
        logger.error("task %s: its record cannot be read: %s", paths.root.name, exc)
        return unreadable_record(paths.root.name, exc, time.time())


def save_job_spec(paths: TaskPaths, spec: JobSpec) -> None:
    written = secret_memory.written_spec(paths.root, spec)
    write_atomically(paths.job_spec, written.model_dump_json().encode(), mode=0o600)


def load_job_spec(paths: TaskPaths) -> JobSpec:
    return secret_memory.read_spec(paths.root, JobSpec.model_validate_json(paths.job_spec.read_bytes()))
