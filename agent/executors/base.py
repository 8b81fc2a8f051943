"""What the agent's task machinery asks of an executor: prepare a job, start it, signal it, watch it end.

The registry (agent.tasks) and the runner role (agent.jobs) keep a task's record and decide its states;
an executor only runs the job and says how it is doing. What it needs to find the job again after an agent
restart goes into the task's record, through the handle that `start` returns.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from agent.records import TaskPaths, TaskRecord
from core.wire.agent_api import JobSpec


@dataclass(frozen=True)
class JobHandle:
    """The process that leads the job and its start time (clock ticks since boot), so that a reused pid is
    never taken for the job; both None when the job ended before the agent could find it."""

    pid: int | None
    start_time: int | None
    host_ports: dict[int, int] = field(default_factory=dict)  # a container's published ports


class JobLiveness(enum.Enum):
    RUNNING = "running"
    EXITED = "exited"  # it ended and left its exit status
    GONE = "gone"  # it is not running and left no exit status


@dataclass(frozen=True)
class JobContext:
    """How a command joins a running job (an SSH session into it): run through `prefix` (empty, or what
    enters the job's namespaces and execs the command in place), with `env`, in `cwd`."""

    prefix: list[str]
    env: dict[str, str]
    cwd: Path
    # The job's network namespace, where forwarded ports connect and listen: a name under /run/netns (a
    # process job's), or a path (a bridged container's /proc/PID/ns/net); None: the host's network.
    netns: str | None


@dataclass(frozen=True)
class JobCheck:
    liveness: JobLiveness
    exit_status: int | None = None
    kill_strays: bool = False  # it exited, but what it started may still run: kill it before the log is done


class Executor(ABC):
    starts_blocking = False  # True: `start` waits on something (an engine), so it is called in a thread

    @abstractmethod
    def prepare(self, paths: TaskPaths, record: TaskRecord, spec: JobSpec) -> Path:
        """Blocking (called in a thread): write what the job runs; return its working directory, created."""

    @abstractmethod
    def start(
        self, paths: TaskPaths, record: TaskRecord, spec: JobSpec, cwd: Path, host_has_gpus: bool
    ) -> JobHandle:
        """Start the job; OSError or ValueError when it could not be started."""

    @abstractmethod
    def release(self, record: TaskRecord) -> None:
        """The job has ended and the agent has all it needs of it: free what the executor holds for it."""

    @abstractmethod
    def find_started(self, paths: TaskPaths) -> JobHandle | None:
        """After an agent restart during the start: the job if it had started, None if it had not."""

    @abstractmethod
    def signal(self, record: TaskRecord, signum: int) -> None:
        """Send `signum` to the whole job, if it still runs (never to a process that reuses its pid)."""

    @abstractmethod
    def kill_strays(self, record: TaskRecord) -> None:
        """Kill whatever the ended job left running, which would keep writing to its finished log."""

    @abstractmethod
    def job_context(
        self, record: TaskRecord, paths: TaskPaths, spec: JobSpec, host_has_gpus: bool
    ) -> JobContext:
        """Where and how a command runs as part of the running job: its environment, working directory,
        network. NetworkError (an OSError) when the job's namespace is gone."""

    @abstractmethod
    def check(self, record: TaskRecord, paths: TaskPaths) -> JobCheck:
        """Whether the running job still runs, and its exit status once it has ended."""

    def tells_its_end(self, record: TaskRecord) -> bool:
        """Whether the job's end wakes the watcher by itself (SIGCHLD, an output stream's end), so that it
        need not be polled for it (agent/task_watch.py)."""
        return False
