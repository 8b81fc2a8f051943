"""When the agent's watcher passes next (agent/task_watch.py next_pass): at the nearest limit of a job
whose end wakes it by itself, every WATCH_INTERVAL while some job's end would not."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from agent.records import StopRequest, TaskRecord
from agent.task_watch import SAFETY_INTERVAL, WATCH_INTERVAL, next_pass
from core.status import JobTerminationReason
from core.wire.agent_api import Resources, TaskStatus

NOW = 1_000_000.0


def record(task_id: str, **fields: Any) -> TaskRecord:
    return TaskRecord(
        id=task_id,
        name=task_id,
        status=TaskStatus.RUNNING,
        resources=Resources(cpu=1, memory=1),
        gpu_indices=[],
        ports=[],
        volumes=[],
        env={},
        created_at=NOW - 100,
        started_at=NOW - 100,
        pid=4242,
        **fields,
    )


@dataclass
class Executor:
    telling: set[str]

    def tells_its_end(self, task: TaskRecord) -> bool:
        return task.id in self.telling


@dataclass
class Registry:
    """What next_pass reads of agent.tasks.TaskRegistry."""

    tasks: list[TaskRecord]
    telling: set[str] = field(default_factory=set)

    def running(self) -> list[TaskRecord]:
        return self.tasks

    @property
    def executors(self) -> Any:
        executor = Executor(self.telling)

        class Executors:
            def for_task(self, task: TaskRecord) -> Executor:
                return executor

        return Executors()


def pause(tasks: list[TaskRecord], telling: set[str] | None = None) -> float:
    registry = Registry(tasks, {t.id for t in tasks} if telling is None else telling)
    return next_pass(cast(Any, registry), NOW)


def test_quiet_jobs_whose_end_wakes_the_watcher_cost_a_pass_every_few_seconds() -> None:
    assert pause([record(f"t{i}") for i in range(1000)]) == SAFETY_INTERVAL
    assert pause([]) == SAFETY_INTERVAL


def test_a_job_whose_end_would_not_wake_it_is_polled() -> None:
    tasks = [record("started-by-me"), record("adopted")]
    assert pause(tasks, telling={"started-by-me"}) == WATCH_INTERVAL


def test_the_nearest_limit_is_when_the_next_pass_is_due() -> None:
    stopped_by = JobTerminationReason.TERMINATED_BY_USER
    stop = StopRequest(reason=stopped_by, requested_at=NOW - 1, kill_at=NOW + 1.5)
    stopping = record("stopping", stop=stop)
    limited = record("limited", deadline=NOW + 3)
    assert pause([limited, stopping]) == 1.5
    assert pause([limited]) == 3
    assert pause([record("late", deadline=NOW - 2)]) == 0  # overdue: at once
    killed = record("killed", stop=stop.model_copy(update={"killed": True}))
    assert pause([killed]) == SAFETY_INTERVAL


def test_a_dev_environment_nobody_is_connected_to_is_due_at_its_inactivity_limit() -> None:
    idle = record("idle", inactivity_duration=2, ssh_last_activity=NOW - 0.5)
    assert pause([idle]) == 1.5
