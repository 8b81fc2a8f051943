"""The watcher: one loop that follows every running job (agent/tasks.py).

Each pass: a stop whose grace period is over gets SIGKILL; a job past its `max_duration`, or a dev
environment with no SSH connection for its `inactivity_duration` (docs/attach.md), is stopped with its
reason; a job whose process exited or vanished is finished.

A pass runs when a job's end wakes it (SIGCHLD for the processes this agent started, a container's output
stream for its containers) and when the nearest of those limits is due; while any job's end would not
wake it (a process an earlier agent started), every WATCH_INTERVAL. So thousands of quiet jobs cost a
pass every few seconds, not four a second (docs/scaling.md). A pass that was woken looks only at the jobs
that may have changed: the processes found ended, the jobs stopping or past a limit, those whose end
would not wake it, the containers; the others wait for the next pass that was not woken (at most
SAFETY_INTERVAL). So aborting 10,000 jobs costs a look at each as it ends, not at all of them each time.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time

from agent.executors import JobLiveness
from agent.records import TaskPaths, TaskRecord, load_job_spec
from agent.retention import RETENTION_CHECK_EVERY, remove_stale
from agent.tasks import TaskRegistry
from core.compat import wait_set
from core.durations import format_duration
from core.status import JobTerminationReason
from core.wire.agent_api import TaskStatus

logger = logging.getLogger(__name__)

WATCH_INTERVAL = 0.25  # seconds between passes while a job's end would not wake the watcher
SAFETY_INTERVAL = 5.0  # ... and at most, even when every end would: a signal missed is a job noticed late
GONE_MESSAGE = "agent restarted and the job's process is gone: it left no exit status"


async def watch_forever(registry: TaskRegistry) -> None:
    wake = asyncio.Event()
    registry.wake_on(wake)
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGCHLD, wake.set)
        told = True
    except (NotImplementedError, RuntimeError, ValueError):
        logger.warning("SIGCHLD handler unavailable: polling every %ss", WATCH_INTERVAL)
        told = False
    retained_at = time.monotonic()  # the agent's start removed what was stale then (agent/main.py)
    while True:
        pause = await next_pass(registry, time.time()) if told else WATCH_INTERVAL
        woken = await wait_set(wake, pause)
        wake.clear()
        await check_running(registry, everyone=not woken)
        if time.monotonic() - retained_at >= RETENTION_CHECK_EVERY:
            retained_at = time.monotonic()
            remove_stale(registry)


# The watcher's loops over every running job go in slices, the agent's requests served between them: a
# pass over 10,000 jobs takes a tenth of a second or more, which would hold every request up as long.
SLICE = 500


def _slices(records: list[TaskRecord]) -> list[list[TaskRecord]]:
    return [records[start : start + SLICE] for start in range(0, len(records), SLICE)]


async def next_pass(registry: TaskRegistry, now: float) -> float:
    """Seconds until the next pass is due, for a watcher that a job's end wakes when it can."""
    due = now + SAFETY_INTERVAL
    for index, records in enumerate(_slices(registry.running())):
        if index:
            await asyncio.sleep(0)
        due = min(due, _due(registry, records, now))
    return max(due - now, 0.0)


async def check_running(registry: TaskRegistry, everyone: bool = True) -> None:
    """Each running job checked (`everyone`), or only those that may have changed (a woken pass)."""
    ended = set() if everyone else registry.executors.process.ended_children()
    for index, records in enumerate(_slices(registry.running())):
        if index:
            await asyncio.sleep(0)
            # a request may have ended or removed some meanwhile
            records = [record for record in records if record.status == TaskStatus.RUNNING]
        _check_some(registry, records, everyone, ended)


def _due(registry: TaskRegistry, records: list[TaskRecord], now: float) -> float:
    """When the next pass is due for these jobs (at most SAFETY_INTERVAL from `now`)."""
    due = now + SAFETY_INTERVAL
    for record in records:
        if not registry.executors.for_task(record).tells_its_end(record):
            return now + WATCH_INTERVAL
        stop = record.stop
        if stop is not None and not stop.killed:
            due = min(due, stop.kill_at)
        if stop is None and record.deadline is not None:
            due = min(due, record.deadline)
        idle = inactive_since(record)
        if stop is None and idle is not None:
            due = min(due, idle + (record.inactivity_duration or 0))
    return due


def _check_some(registry: TaskRegistry, records: list[TaskRecord], everyone: bool, ended: set[int]) -> None:
    now = time.time()
    for record in records:
        if not everyone and not _may_have_changed(registry, record, now, ended):
            continue
        try:
            _check(registry, record, now)
        except Exception:
            logger.exception("checking task %s failed", record.id)


def _may_have_changed(registry: TaskRegistry, record: TaskRecord, now: float, ended: set[int]) -> bool:
    """Whether a woken pass looks at the job: its process ended, it is stopping or past a limit, or its
    end would not have woken the pass (a container's is checked as before)."""
    if record.pid in ended or record.stop is not None or record.container is not None:
        return True
    if record.deadline is not None and now >= record.deadline:
        return True
    idle = inactive_since(record)
    if idle is not None and now - idle >= (record.inactivity_duration or 0):
        return True
    return not registry.executors.for_task(record).tells_its_end(record)


def inactive_since(record: TaskRecord) -> float | None:
    """Since when nobody has been connected to a job that may be ended for it (None: someone is, or the
    job has no `inactivity_duration`)."""
    if record.inactivity_duration is None or record.ssh_connections > 0 or record.started_at is None:
        return None
    return max(record.ssh_last_activity or record.started_at, record.started_at)


def _check(registry: TaskRegistry, record: TaskRecord, now: float) -> None:
    paths = registry.paths(record.id)
    executor = registry.executors.for_task(record)
    stop = record.stop
    if stop is not None and not stop.killed and now >= stop.kill_at:
        stop.killed = True
        registry.save(record)
        executor.signal(record, signal.SIGKILL)
    if stop is None and record.deadline is not None and now >= record.deadline:
        assert record.started_at is not None
        limit = round(record.deadline - record.started_at)
        reason = JobTerminationReason.MAX_DURATION_EXCEEDED
        registry.request_stop(record, reason, f"max_duration of {limit}s exceeded", _grace(paths))
    idle = inactive_since(record)
    if record.stop is None and idle is not None and now - idle >= (record.inactivity_duration or 0):
        quiet = format_duration(record.inactivity_duration)
        message = f"no SSH connection for {quiet} (inactivity_duration)"
        reason = JobTerminationReason.INACTIVITY_DURATION_EXCEEDED
        registry.request_stop(record, reason, message, _grace(paths))
    check = executor.check(record, paths)
    if check.liveness == JobLiveness.EXITED:
        registry.finish(record, check.exit_status, check.kill_strays)
    elif check.liveness == JobLiveness.GONE:
        if record.stop is not None:
            reason = record.stop.reason
            registry.finalize(record, reason, record.stop.message or reason.message(), exit_status=None)
        else:
            registry.finalize(record, JobTerminationReason.EXECUTOR_ERROR, GONE_MESSAGE, exit_status=None)


def _grace(paths: TaskPaths) -> float:
    """The job's stop_duration, for a stop the agent decides itself."""
    try:
        return float(load_job_spec(paths).stop_duration)
    except (OSError, ValueError):
        return 10.0
