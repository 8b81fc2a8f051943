"""The change feed: what changed on this agent's tasks since a cursor, for the worker's one watch per
instance (docs/jobs.md#the-instance-watch).

A task changes when it gets a new state (running, stopping, ended), when it is removed, and when its log
grows. States are told by the registry as they happen; a job writes its log itself, so the feed looks at
the log files' sizes, often while a log grows and more rarely the longer it stays quiet (up to once a
second): a quiet job then costs a `stat` a second and nothing else, however long it runs.
"""

from __future__ import annotations

import asyncio
import heapq
import time
import uuid
from typing import Protocol

from agent.logs import log_size
from agent.records import TaskPaths, TaskRecord
from core.compat import wait_set
from core.wire.agent_api import ChangesResponse, TaskChange, TaskStatus

MAX_CHANGES_WAIT = 30.0
_LOOK_MIN = 0.02  # seconds between looks at a log that just grew
_LOOK_MAX = 1.0  # ... and at one that has been quiet for a while
_LOOK_GROWTH = 1.5
_TICK = 0.05  # a waiting request wakes at most this often to look at the logs that are due
# ... and looks at no more than this many at once: 10,000 quiet jobs are 10,000 looks a second, and a batch
# of them all would hold the agent's other requests up (the rest are looked at one tick later).
_LOOKS_AT_ONCE = 1000
# Removed tasks are remembered (to be reported as removed) up to this many; a watch whose cursor is older
# than the oldest forgotten one learns of the removal by the task's absence from a full listing.
_REMEMBER_REMOVED = 10_000


class Tasks(Protocol):
    """What the feed reads of the task registry (agent/tasks.py), which tells it of every change."""

    def find(self, task_id: str) -> TaskRecord | None: ...

    def records(self) -> list[TaskRecord]: ...

    def paths(self, task_id: str) -> TaskPaths: ...


class ChangeFeed:
    def __init__(self, registry: Tasks) -> None:
        self._registry = registry
        self.epoch = uuid.uuid4().hex
        self._seq = 0
        self._changed: dict[str, int] = {}  # task id -> the sequence number of its last change, oldest first
        self._removed: set[str] = set()
        self._news = asyncio.Event()
        self._looks: list[tuple[float, str]] = []  # (when, task id): a heap of the logs to look at
        self._interval: dict[str, float] = {}  # the running tasks whose logs are looked at
        self._log_paths: dict[str, str] = {}  # ... and their logs' paths, made once (10,000 looks a second)
        self._sizes: dict[str, int] = {}
        self._primed = False

    def changed(self, task_id: str) -> None:
        """The registry's word that a task has a new state or was removed."""
        self._seq += 1
        self._changed.pop(task_id, None)
        self._changed[task_id] = self._seq
        record = self._registry.find(task_id)
        if record is None:
            self._removed.add(task_id)
            self._forget_removed()
        else:
            self._removed.discard(task_id)
            if record.status == TaskStatus.RUNNING:
                self._follow_log(task_id)
        news, self._news = self._news, asyncio.Event()
        news.set()

    async def wait(self, cursor: int, epoch: str, wait: float) -> ChangesResponse:
        """What changed since `cursor` in `epoch`, held up to `wait` seconds while nothing has."""
        if not self._primed:  # the tasks a previous agent left running: their logs are followed too
            self._primed = True
            for record in self._registry.records():
                if record.status == TaskStatus.RUNNING:
                    self._follow_log(record.id)
        full = cursor == 0 or epoch != self.epoch
        deadline = time.monotonic() + min(wait, MAX_CHANGES_WAIT)
        while True:
            now = time.monotonic()
            self._look_at_logs(now)
            left = deadline - now
            if full or self._seq > cursor or left <= 0:
                return self._since(0 if full else cursor)
            pause = max(min(left, (self._looks[0][0] - now) if self._looks else left), _TICK)
            news = self._news
            await wait_set(news, min(pause, left))

    def _since(self, cursor: int) -> ChangesResponse:
        registry = self._registry
        tasks: list[TaskChange] = []
        removed: list[str] = []
        if cursor == 0:
            tasks = [self._change(record) for record in registry.records()]
        else:
            for task_id, seq in reversed(self._changed.items()):
                if seq <= cursor:
                    break
                record = registry.find(task_id)
                if record is None:
                    removed.append(task_id)
                else:
                    tasks.append(self._change(record))
        return ChangesResponse(epoch=self.epoch, cursor=self._seq, tasks=tasks, removed=removed)

    def _change(self, record: TaskRecord) -> TaskChange:
        # Read after the status: a task that had ended then has its whole log now.
        status = record.status
        return TaskChange(
            id=record.id,
            owner=record.owner,
            status=status,
            log_size=log_size(self._registry.paths(record.id).log),
            termination_reason=record.termination_reason,
            termination_message=record.termination_message,
            exit_status=record.exit_status,
        )

    # --- logs -------------------------------------------------------------------------------------

    def _follow_log(self, task_id: str) -> None:
        if task_id not in self._interval:
            self._interval[task_id] = _LOOK_MIN
            self._log_paths[task_id] = str(self._registry.paths(task_id).log)
            heapq.heappush(self._looks, (time.monotonic(), task_id))

    def _look_at_logs(self, now: float) -> None:
        """Look at the logs that are due (_LOOKS_AT_ONCE at most); one that grew is a change."""
        registry = self._registry
        for _ in range(_LOOKS_AT_ONCE):
            if not self._looks or self._looks[0][0] > now:
                break
            _, task_id = heapq.heappop(self._looks)
            record = registry.find(task_id)
            if record is None or record.status != TaskStatus.RUNNING:
                self._interval.pop(task_id, None)
                self._sizes.pop(task_id, None)
                self._log_paths.pop(task_id, None)
                continue
            size = log_size(self._log_paths[task_id])
            if size != self._sizes.get(task_id, 0):
                self._sizes[task_id] = size
                interval = _LOOK_MIN
                self.changed(task_id)
            else:
                interval = min(self._interval[task_id] * _LOOK_GROWTH, _LOOK_MAX)
            self._interval[task_id] = interval
            heapq.heappush(self._looks, (now + interval, task_id))

    def _forget_removed(self) -> None:
        if len(self._removed) <= _REMEMBER_REMOVED:
            return
        for task_id in list(self._changed):
            if task_id in self._removed:
                del self._changed[task_id]
                self._removed.discard(task_id)
                if len(self._removed) <= _REMEMBER_REMOVED // 2:
                    return
