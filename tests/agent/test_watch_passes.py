"""When the agent's watcher passes next (agent/task_watch.py next_pass): at the nearest limit of a job
whose end wakes it by itself, every WATCH_INTERVAL while some job's end would not."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from agent import task_watch
from agent.executors import JobLiveness, ProcessExecutor
from agent.records import TaskPaths, TaskRecord, TaskStop
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
        **{"pid": 4242, **fields},
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
    return asyncio.run(next_pass(cast(Any, registry), NOW))


def test_quiet_jobs_whose_end_wakes_the_watcher_cost_a_pass_every_few_seconds() -> None:
    assert pause([record(f"t{i}") for i in range(1000)]) == SAFETY_INTERVAL
    assert pause([]) == SAFETY_INTERVAL


def test_a_job_whose_end_would_not_wake_it_is_polled() -> None:
    tasks = [record("started-by-me"), record("adopted")]
    assert pause(tasks, telling={"started-by-me"}) == WATCH_INTERVAL


def test_the_nearest_limit_is_when_the_next_pass_is_due() -> None:
    stopped_by = JobTerminationReason.TERMINATED_BY_USER
    stop = TaskStop(reason=stopped_by, requested_at=NOW - 1, kill_at=NOW + 1.5)
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


async def test_a_pass_a_sigchld_woke_checks_only_the_jobs_that_may_have_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ended processes, stopping jobs, jobs past a limit, containers and jobs whose end would not wake the
    watcher are checked; a quiet job waits for the next full pass."""
    stop = TaskStop(reason=JobTerminationReason.TERMINATED_BY_USER, requested_at=NOW - 1, kill_at=NOW + 9)
    quiet = [record(f"quiet{i}", pid=1000 + i) for i in range(50)]
    changed = [
        record("ended", pid=7),
        record("stopping", pid=8, stop=stop),
        record("late", pid=9, deadline=NOW - 1),
        record("idle", pid=10, inactivity_duration=2, ssh_last_activity=NOW - 3),
        record("adopted", pid=11),
    ]
    everything = [*quiet, *changed]
    registry = Registry(everything, {t.id for t in everything} - {"adopted"})
    registry_executors = registry.executors

    class Process:
        def ended_children(self) -> set[int]:
            return {7}

    registry_executors.process = Process()
    checked: list[str] = []
    monkeypatch.setattr(task_watch, "_check", lambda registry, task, now: checked.append(task.id))
    monkeypatch.setattr(task_watch.time, "time", lambda: NOW)
    woken = cast(Any, SimpleNamespace(running=registry.running, executors=registry_executors))
    await task_watch.check_running(woken, everyone=False)
    assert checked == [t.id for t in changed]
    checked.clear()
    await task_watch.check_running(woken)
    assert checked == [t.id for t in everything]


async def test_a_pass_over_many_jobs_lets_the_agent_answer_between_its_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full pass over more jobs than a slice yields to the event loop between slices (its requests are
    served meanwhile), and a job that ended during such a pause is not checked again."""
    tasks = [record(f"t{i}", pid=2000 + i) for i in range(task_watch.SLICE * 2 + 10)]
    registry = Registry(tasks, {t.id for t in tasks})
    checked: list[str] = []
    monkeypatch.setattr(task_watch, "_check", lambda registry, task, now: checked.append(task.id))
    served: list[int] = []

    async def request() -> None:
        """A request that arrives while the pass runs: it ends a job the pass has not reached yet."""
        served.append(len(checked))
        tasks[-1].status = TaskStatus.TERMINATED

    pending = asyncio.ensure_future(request())
    await task_watch.check_running(cast(Any, registry))
    await pending
    assert served == [task_watch.SLICE]  # answered after the first slice, not after the whole pass
    assert checked == [t.id for t in tasks[:-1]]
    assert await next_pass(cast(Any, registry), NOW) == SAFETY_INTERVAL


def test_the_process_executor_finds_its_ended_children_and_checks_each_once() -> None:
    """One waitpid per child: an ended one is reaped once, its status kept until its job is checked."""
    executor = ProcessExecutor()
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    try:
        executor._children.update(p.pid for p in sleepers)
        assert executor.ended_children() == set()
        os.kill(sleepers[1].pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not (ended := executor.ended_children()):
            assert time.monotonic() < deadline, "the killed child never ended"
            time.sleep(0.05)
        assert ended == {sleepers[1].pid}
        task = record("killed", pid=sleepers[1].pid)
        with tempfile.TemporaryDirectory() as root:
            result = executor.check(task, TaskPaths(Path(root)))
        assert (result.liveness, result.exit_status) == (JobLiveness.EXITED, 128 + signal.SIGKILL)
        assert executor.ended_children() == set()
    finally:
        for sleeper in sleepers:
            with contextlib.suppress(ProcessLookupError):
                sleeper.kill()
            with contextlib.suppress(ChildProcessError):
                os.waitpid(sleeper.pid, 0)


def test_the_change_feed_looks_at_a_bounded_number_of_logs_at_once(tmp_path: Path) -> None:
    """10,000 quiet jobs are 10,000 looks at their logs a second: each call looks at no more than
    _LOOKS_AT_ONCE of those due, so the agent's other requests wait for no batch of them all; the rest are
    looked at by the next calls, and a log that grew is news."""
    from agent import changes

    count = changes._LOOKS_AT_ONCE * 2 + 5  # noqa: SLF001
    tasks = {f"t{i}": record(f"t{i}") for i in range(count)}

    class Tasks:
        def find(self, task_id: str) -> TaskRecord | None:
            return tasks.get(task_id)

        def records(self) -> list[TaskRecord]:
            return list(tasks.values())

        def paths(self, task_id: str) -> TaskPaths:
            return TaskPaths(tmp_path / task_id)

    looked: list[str] = []
    real_size = changes.log_size

    def size(path: str) -> int:
        looked.append(Path(path).parent.name)
        return real_size(path)

    feed = changes.ChangeFeed(Tasks())
    for task_id in tasks:
        (tmp_path / task_id).mkdir()
        feed._follow_log(task_id)  # noqa: SLF001
    TaskPaths(tmp_path / "t7").log.write_bytes(b"grew")
    now = time.monotonic() + 1
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(changes, "log_size", size)
        feed._look_at_logs(now)  # noqa: SLF001
        assert len(looked) == changes._LOOKS_AT_ONCE  # noqa: SLF001
        feed._look_at_logs(now)  # noqa: SLF001
        feed._look_at_logs(now)  # noqa: SLF001
    assert sorted(looked) == sorted(tasks)
    assert list(feed._changed) == ["t7"]  # noqa: SLF001 - the one change heard
