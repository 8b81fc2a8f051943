"""A running task's use of its host, sampled when asked (docs/jobs.md#metrics): CPU, memory and GPUs.

Nothing runs between asks, so an idle task costs nothing. CPU use is a rate: it takes two readings of the
job's CPU time. The reading an ask takes is kept (one per task asked, dropped when the task ends), so the
next ask within `MAX_KEPT_AGE` measures over the time since; an ask with no usable reading kept takes two,
`WINDOW` apart. A process job is read from /proc: its wrapper's process tree (the processes it leads),
their CPU time (their reaped children's included) and resident memory. A container job is read from its
engine's stats (the Docker Engine API, one shot): its cgroup's CPU time and memory, and its limit. GPUs
are the task's, as `nvidia-smi` reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

from docker.errors import DockerException
from requests.exceptions import RequestException

from agent.executors.process import is_same_process_alive
from agent.gpus import gpu_use
from agent.records import TaskRecord
from agent.tasks import TaskConflict, TaskRegistry
from core.wire.agent_api import BYTES_PER_GB, TaskMetrics, TaskStatus

WINDOW = 0.5  # seconds between the two readings of an ask with no usable reading kept
MIN_KEPT_AGE = 0.2  # a kept reading younger than this makes too short an interval to mean anything
MAX_KEPT_AGE = 10.0  # one older than this would average away what the job does now
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class MetricsUnavailable(TaskConflict):
    """The task does not run (any more), or its processes or container cannot be read: answered 409."""


@dataclass(frozen=True)
class Reading:
    at: float  # time.monotonic()
    cpu_seconds: float  # CPU time the job has used, cumulative
    memory_used: int
    memory_limit: int | None  # a container's; None: the job has none of its own
    processes: int | None


@dataclass(frozen=True)
class ProcStat:
    cpu_ticks: int  # utime + stime + cutime + cstime
    rss_pages: int


def read_proc_stat(pid: int) -> ProcStat | None:
    """A process's CPU ticks (its reaped children's included) and resident pages; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    # After the command name: utime, stime, cutime, cstime are the line's fields 14-17, rss its 24th.
    ticks = sum(int(value) for value in fields[11:15])
    return ProcStat(cpu_ticks=ticks, rss_pages=int(fields[21]))


def _children(pid: int) -> list[int]:
    """The children of every thread of `pid` (/proc/PID/task/TID/children)."""
    children: list[int] = []
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with (
                contextlib.suppress(FileNotFoundError, ProcessLookupError),
                open(f"/proc/{pid}/task/{tid}/children", "rb") as listed,
            ):
                children += [int(child) for child in listed.read().split()]
    return children


def process_tree(root: int) -> list[int]:
    """`root` and its descendants, as /proc lists them now."""
    found, pending = [], [root]
    seen = {root}
    while pending:
        pid = pending.pop()
        found.append(pid)
        for child in _children(pid):
            if child not in seen:
                seen.add(child)
                pending.append(child)
    return found


def processes_reading(record: TaskRecord) -> Reading:
    """A process job's reading: its wrapper's process tree (the wrapper leads the job, docs/jobs.md)."""
    if record.pid is None or not is_same_process_alive(record.pid, record.pid_start_time):
        raise MetricsUnavailable(f"task {record.id!r}: the job's processes have ended")
    at = time.monotonic()
    stats = [stat for pid in process_tree(record.pid) if (stat := read_proc_stat(pid)) is not None]
    return Reading(
        at=at,
        cpu_seconds=sum(stat.cpu_ticks for stat in stats) / CLOCK_TICKS,
        memory_used=sum(stat.rss_pages for stat in stats) * PAGE_SIZE,
        memory_limit=None,
        processes=len(stats),
    )


def container_stats_reading(stats: dict[str, Any], at: float) -> Reading:
    """A reading from the Docker Engine API's container stats (docker's and podman's alike)."""
    cpu = stats.get("cpu_stats") or {}
    usage = (cpu.get("cpu_usage") or {}).get("total_usage")
    memory = stats.get("memory_stats") or {}
    if usage is None or "usage" not in memory:
        raise MetricsUnavailable("the container engine's stats have no CPU or memory figures")
    details = memory.get("stats") or {}
    # As `docker stats` counts: the page cache the kernel may drop at once is not the job's use.
    inactive = details.get("inactive_file", details.get("total_inactive_file", 0))
    used = max(0, int(memory["usage"]) - int(inactive))
    limit = memory.get("limit")
    pids = (stats.get("pids_stats") or {}).get("current")
    return Reading(
        at=at,
        cpu_seconds=int(usage) / 1e9,
        memory_used=used,
        memory_limit=int(limit) if limit else None,
        processes=int(pids) if pids is not None else None,
    )


class MetricsSampler:
    """Samples tasks when asked; keeps the last reading of each task asked about until the task ends."""

    def __init__(self, registry: TaskRegistry) -> None:
        self._registry = registry
        self._kept: dict[str, Reading] = {}
        registry.end_listeners.append(self.forget)

    def forget(self, task_id: str) -> None:
        self._kept.pop(task_id, None)

    async def sample(self, task_id: str) -> TaskMetrics:
        """TaskNotFound (404) for an unknown task, MetricsUnavailable (409) for one that does not run."""
        record = self._running(task_id)
        latest = await self._read(record)
        earlier = self._kept.get(task_id)
        if earlier is None or not MIN_KEPT_AGE <= latest.at - earlier.at <= MAX_KEPT_AGE:
            await asyncio.sleep(WINDOW)
            record = self._running(task_id)
            earlier, latest = latest, await self._read(record)
        if record.status == TaskStatus.RUNNING:  # not when it ended while read: forget has been called
            self._kept[task_id] = latest
        window = latest.at - earlier.at
        # A process reaped by a parent outside the tree takes its time with it: never below zero.
        cpu_percent = max(0.0, latest.cpu_seconds - earlier.cpu_seconds) / window * 100
        host = self._registry.capacity.memory_bytes
        granted = int(record.resources.memory * BYTES_PER_GB)
        gpus = []
        if record.gpu_indices and self._registry.gpus:
            gpus = await asyncio.to_thread(gpu_use, record.gpu_indices)
        return TaskMetrics(
            task_id=task_id,
            timestamp=time.time(),
            source="processes" if record.container is None else "container",
            cpu_percent=round(cpu_percent, 1),
            window_seconds=round(window, 3),
            cpus=record.resources.cpu,
            memory_used_bytes=latest.memory_used,
            memory_limit_bytes=latest.memory_limit or granted or host,
            processes=latest.processes,
            gpus=gpus,
        )

    def _running(self, task_id: str) -> TaskRecord:
        record = self._registry.get(task_id)
        if record.status != TaskStatus.RUNNING:
            raise MetricsUnavailable(f"task {task_id!r} is {record.status}: only a running job has metrics")
        return record

    async def _read(self, record: TaskRecord) -> Reading:
        if record.container is None:
            return processes_reading(record)
        return await asyncio.to_thread(self._container_reading, record)

    def _container_reading(self, record: TaskRecord) -> Reading:
        """Blocking: one call to the engine."""
        engine = self._registry.executors.container.engine
        try:
            container_id = self._registry.paths(record.id).container_id.read_text()
        except OSError:
            container_id = None
        if engine is None or container_id is None:
            raise MetricsUnavailable(f"task {record.id!r}: the job's container is not known")
        at = time.monotonic()
        try:
            stats = engine.api.stats(container_id, stream=False, one_shot=True)
        except (DockerException, RequestException) as exc:
            raise MetricsUnavailable(f"task {record.id!r}: the container's stats: {exc}") from exc
        return container_stats_reading(stats, at)
