"""The executors that run tasks' jobs, and which one runs a given task's job."""

from __future__ import annotations

from pathlib import Path

from agent.containers.engine import EngineFinder
from agent.executors.base import Executor, JobCheck, JobContext, JobHandle, JobLiveness
from agent.executors.container import ContainerExecutor
from agent.executors.process import ProcessExecutor
from agent.records import TaskRecord


class Executors:
    """One executor of each kind for the whole agent: an executor keeps state across its tasks (the
    process executor, the wrappers it must reap; the container executor, the threads that follow its
    containers)."""

    def __init__(self, data_dir: Path, engines: EngineFinder | None = None) -> None:
        self.process = ProcessExecutor()
        self.container = ContainerExecutor(engines, data_dir)

    def for_task(self, record: TaskRecord) -> Executor:
        return self.process if record.container is None else self.container


__all__ = [
    "ContainerExecutor",
    "Executor",
    "Executors",
    "JobCheck",
    "JobContext",
    "JobHandle",
    "JobLiveness",
    "ProcessExecutor",
]
