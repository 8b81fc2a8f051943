"""One instance's watch: every job's state and logs on an instance, through one long-poll of its agent
(docs/jobs.md#the-instance-watch).

The agent's change feed (`GET /api/changes`) answers as soon as a task has news (a new state, more log
bytes) or after a few quiet seconds. The watch stores the new log bytes of the tasks that have them and,
once a task has ended and its whole log is stored, signals the task's owner (its job's workflow) how it
ended. A quiet job costs nothing here: no request, no heartbeat, no event. An agent silent for
`unreachable_after` seconds ends every job it runs with INSTANCE_UNREACHABLE, as a job's own watch did.

Restarted (another attempt, another worker), the watch asks for every task again: it stores what is
missing of each log (bytes already stored are skipped) and tells again every ended task, which a job
that has already heard ignores.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from dataclasses import dataclass, field

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.agent_client import HTTP_NOT_FOUND, AgentClient, AgentError, AgentUnreachable
from activities.handover import hands_over
from activities.heartbeats import heartbeating
from activities.instances import InstanceDirectory
from core.status import JobTerminationReason
from core.wire import activity_names as names
from core.wire.agent_api import TaskChange, TaskStatus
from core.wire.messages import TASK_ENDED, JobOutcome, WatchInstance
from store import Store

_CHANGES_WAIT = 5.0  # seconds the agent holds a quiet request: at most half the silence that means lost
_RETRY_UNREACHABLE = 0.5
_PULL_LIMIT = 4 * 1024 * 1024
_PULLS_AT_ONCE = 8  # tasks whose logs are pulled at the same time
_SIGNAL_RETRY = 1.0


@dataclass
class _Followed:
    """A task the watch follows: its log as stored, how far the agent said it goes, its end once told."""

    owner: str
    stored: int | None = None  # bytes of its log stored (None: not asked of the store yet)
    size: int = 0  # bytes of its log on the agent, as last heard
    ended: JobOutcome | None = None
    told: bool = False
    working: asyncio.Task[None] | None = field(default=None, repr=False)


class InstanceWatchActivities:
    def __init__(self, instances: InstanceDirectory, store: Store, client: Client) -> None:
        self.instances = instances
        self.store = store
        self._client = client
        # The watch this worker runs for each instance and project, and whether a newer one replaced it.
        self._watching: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._replaced: set[asyncio.Task[None]] = set()

    @activity.defn(name=names.WATCH_INSTANCE)
    @hands_over
    async def watch_instance(self, request: WatchInstance) -> None:
        """Until cancelled (the fleet ends or moves on): follow the instance's tasks. A newer watch of the
        same instance and project on this worker replaces this one, which then returns: the fleet
        abandoned it when the instance fell idle, and it hears so only at its next heartbeat, seconds
        later, while the newer one would tell every job a second time."""
        key = (request.instance_name, request.owners)
        watch = _Watch(self, request)
        running = asyncio.create_task(watch.run())
        older = self._watching.get(key)
        if older is not None:
            self._replaced.add(older)
            older.cancel()
        self._watching[key] = running
        try:
            async with heartbeating():
                await running
        except asyncio.CancelledError:
            if running not in self._replaced:
                raise
        finally:
            running.cancel()
            self._replaced.discard(running)
            if self._watching.get(key) is running:
                del self._watching[key]
            await watch.close()

    async def tell(self, owner: str, outcome: JobOutcome) -> None:
        """Signal the job's workflow how its task ended; one that has already finished needs nothing."""
        handle = self._client.get_workflow_handle(owner)
        while True:
            try:
                await handle.signal(TASK_ENDED, outcome)
                return
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return
                activity.logger.warning("telling %s its task ended failed: %s", owner, err)
            await asyncio.sleep(_SIGNAL_RETRY)


class _Watch:
    def __init__(self, activities: InstanceWatchActivities, request: WatchInstance) -> None:
        self._activities = activities
        self._store = activities.store
        self._request = request
        self._tasks: dict[str, _Followed] = {}
        self._pulls = asyncio.Semaphore(_PULLS_AT_ONCE)
        self._telling: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        request = self._request
        client = await self._activities.instances.resolve(request.instance_name)
        cursor, epoch = 0, ""
        last_answer = time.monotonic()
        while True:
            try:
                changes = await client.changes(cursor, epoch, wait=0.0 if cursor == 0 else _CHANGES_WAIT)
            except AgentUnreachable as err:
                silent = time.monotonic() - last_answer
                if silent >= request.unreachable_after:
                    self._lost(f"{request.instance_name} silent for {silent:.0f}s: {err}")
                await asyncio.sleep(_RETRY_UNREACHABLE)
                continue
            last_answer = time.monotonic()
            if changes.epoch != epoch or cursor == 0:
                # Every task, listed: one this watch followed that is missing has vanished.
                listed = {change.id for change in changes.tasks}
                self._vanished([task_id for task_id in self._tasks if task_id not in listed])
            cursor, epoch = changes.cursor, changes.epoch
            for change in changes.tasks:
                self._heard(client, change)
            self._vanished(changes.removed)
            self._kick(client)

    def _heard(self, client: AgentClient, change: TaskChange) -> None:
        task = self._tasks.get(change.id)
        # A task the agent restarted cannot read the record of has no owner now: its owner was heard before.
        owner = change.owner or (task.owner if task is not None else None)
        if owner is None or not owner.startswith(self._request.owners):
            return  # another project's, or a job that watches its task itself
        if task is None:
            task = self._tasks[change.id] = _Followed(owner=owner)
        task.size = max(task.size, change.log_size)
        if change.status == TaskStatus.TERMINATED and task.ended is None:
            task.ended = JobOutcome(
                termination_reason=change.termination_reason or JobTerminationReason.EXECUTOR_ERROR,
                termination_message=change.termination_message,
                exit_status=change.exit_status,
                task_id=change.id,
            )
        if _behind(task) or (task.ended is not None and not task.told):
            self._work_on(change.id, task, client)

    def _work_on(self, task_id: str, task: _Followed, client: AgentClient) -> None:
        if task.working is None or task.working.done():
            task.working = asyncio.create_task(self._catch_up(task_id, task, client))

    async def _catch_up(self, task_id: str, task: _Followed, client: AgentClient) -> None:
        """Store the task's log up to what the agent last said, then, if it has ended, tell its owner."""
        try:
            while _behind(task):
                async with self._pulls:
                    await self._store_log(task_id, task, client)
            if task.ended is not None and not task.told:
                task.told = True
                await self._activities.tell(task.owner, task.ended)
        except AgentUnreachable:
            pass  # the feed's next answer brings it back here (`_kick`)
        except AgentError as err:
            if err.status_code != HTTP_NOT_FOUND:  # not found: removed meanwhile, as the feed says
                activity.logger.warning("storing the log of %s failed: %s", task_id, err)
        except Exception as err:  # the store, say: tried again after the feed's next answer
            activity.logger.warning("storing the log of %s failed: %s", task_id, err)

    def _kick(self, client: AgentClient) -> None:
        """Work left undone (an agent or store that failed meanwhile) is taken up again."""
        for task_id, task in self._tasks.items():
            idle = task.working is None or task.working.done()
            if idle and (_behind(task) or (task.ended is not None and not task.told)):
                self._work_on(task_id, task, client)

    async def _store_log(self, task_id: str, task: _Followed, client: AgentClient) -> None:
        if task.stored is None:
            task.stored = await asyncio.to_thread(self._store.log_size, task_id)
        while task.stored is not None and task.stored < task.size:
            pulled = await client.pull(task_id, offset=task.stored, limit=_PULL_LIMIT)
            data = base64.b64decode(pulled.logs)
            if not data:
                task.size = task.stored  # the agent said more than there is (it restarted): as it is
                return
            task.stored = await asyncio.to_thread(
                self._store.append_log, task_id, pulled.offset, data, time.time()
            )

    def _lost(self, why: str) -> None:
        """The agent has been silent too long: every job it ran has ended with its instance."""
        for task_id, task in self._tasks.items():
            if task.ended is None:
                task.ended = JobOutcome(
                    termination_reason=JobTerminationReason.INSTANCE_UNREACHABLE,
                    termination_message=why,
                    task_id=task_id,
                )
            if not task.told:
                task.told = True
                self._tell_later(task.owner, task.ended)

    def _vanished(self, task_ids: list[str]) -> None:
        """Tasks gone from the agent: one whose end was not told ended without word."""
        for task_id in task_ids:
            task = self._tasks.pop(task_id, None)
            if task is None or task.told:
                continue
            if task.working is not None:
                task.working.cancel()
            task.told = True
            outcome = task.ended or JobOutcome(
                termination_reason=JobTerminationReason.EXECUTOR_ERROR,
                termination_message=f"the task vanished from {self._request.instance_name}",
                task_id=task_id,
            )
            self._tell_later(task.owner, outcome)

    def _tell_later(self, owner: str, outcome: JobOutcome) -> None:
        telling = asyncio.create_task(self._activities.tell(owner, outcome))
        self._telling.add(telling)  # the loop keeps only a weak reference to a task
        telling.add_done_callback(self._telling.discard)

    async def close(self) -> None:
        working = [t.working for t in self._tasks.values() if t.working is not None] + list(self._telling)
        for job in working:
            job.cancel()
        for job in working:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await job


def _behind(task: _Followed) -> bool:
    """Its log has bytes on the agent that are not stored yet (or the store was not asked yet)."""
    return task.size > 0 and (task.stored is None or task.stored < task.size)
