"""The executors that run tasks' jobs, and which one runs a given task's job."""

from __future__ import annotations

from agent.executors.base import Executor, JobCheck, JobContext, JobHandle, JobLiveness
from agent.executors.process import ProcessExecutor
from agent.records import TaskRecord


class Executors:
    """One executor of each kind for the whole agent: an executor keeps state across its tasks (the
    process executor, the wrappers it must reap)."""

    def __init__(self) -> None:
        self.process = ProcessExecutor()

    def for_task(self, record: TaskRecord) -> Executor:
        # Every job runs as host processes today; a job with an `image` will get a container executor here.
        return self.process


__all__ = ["Executor", "Executors", "JobCheck", "JobContext", "JobHandle", "JobLiveness", "ProcessExecutor"]
