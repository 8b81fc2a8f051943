"""The task registry: the shim role's tasks, their resources, and the end of their jobs.

Every mutation happens on the event loop's thread and never awaits between its check and its change, so
two requests cannot both take the same GPU or start the same job. Each transition is written to disk
before it is answered. One watcher loop (agent/task_watch.py), woken by SIGCHLD and a short timer, follows
every running job; it keeps nothing per job but the job's record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

from agent import network, secret_memory, task_network
from agent.changes import ChangeFeed
from agent.containers.engine import EngineFinder
from agent.executors import Executors, JobHandle
from agent.instance import HostCapacity
from agent.records import TaskPaths, TaskRecord, TaskStop, load_job_spec, read_record, save_record
from agent.resources import InsufficientResources, ResourceLedger
from agent.ssh_keys import BadAuthorizedKey, check_authorized_keys
from agent.volumes import unlink_paths
from core.compat import wait_set
from core.status import JobStatus, JobTerminationReason
from core.wire.agent_api import (
    GpuInfo,
    JobStateEvent,
    TaskInfo,
    TaskStatus,
    TaskSubmitRequest,
    TerminateRequest,
)

logger = logging.getLogger(__name__)


class TaskNotFound(Exception):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id!r} not found")


class TaskConflict(Exception):
    """The request does not fit the task's state or the host's free resources."""


class BadTaskRequest(Exception):
    pass


# What the API answers each of these with (agent/app.py), a batch's task too (agent/batches.py).
ERROR_STATUSES: tuple[tuple[type[Exception], int], ...] = (
    (TaskNotFound, 404),
    (TaskConflict, 409),
    (BadTaskRequest, 400),
)


def _as_submitted(record: TaskRecord) -> TaskSubmitRequest:
    return TaskSubmitRequest(
        id=record.id,
        name=record.name,
        resources=record.resources,
        ports=record.ports,
        volumes=record.volumes,
        env=record.env,
        network=record.requested_network,
        authorized_keys=record.authorized_keys,
        container=record.container,
        owner=record.owner,
    )


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: the agent is exiting
        loop.call_soon_threadsafe(callback)


class TaskRegistry:
    def __init__(
        self,
        data_dir: Path,
        capacity: HostCapacity,
        gpus: list[GpuInfo],
        engines: EngineFinder | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.tasks_dir = data_dir / "tasks"
        self.capacity = capacity
        self.gpus = gpus
        self.ledger = ResourceLedger.for_host(capacity.cpus, capacity.memory_bytes, [g.index for g in gpus])
        self._records: dict[str, TaskRecord] = {}
        self._watched: set[str] = set()  # running tasks
        self.executors = Executors(data_dir, engines)
        self.busy: set[str] = set()  # tasks with an upload or a preparation in flight
        self._new: dict[str, TaskRecord] = {}  # tasks whose records are being written (new_record)
        self._wake: asyncio.Event | None = None  # set by agent.task_watch's loop: woken at a stop
        self._news: dict[str, asyncio.Event] = {}  # per task: set when it gets a job state or goes
        # Called with a task's id when its job has ended and when it is removed (the SSH server closes
        # the connections into it).
        self.end_listeners: list[Callable[[str], None]] = []
        self.changes = ChangeFeed(self)  # the instance watch's feed of every task's news (agent/changes.py)

    # --- records ---------------------------------------------------------------------------------------

    def paths(self, task_id: str) -> TaskPaths:
        return TaskPaths(self.tasks_dir / task_id)

    def get(self, task_id: str) -> TaskRecord:
        record = self._records.get(task_id)
        if record is None:
            raise TaskNotFound(task_id)
        return record

    def list_tasks(self) -> list[TaskInfo]:
        return [record.to_info() for record in self._records.values()]

    def find(self, task_id: str) -> TaskRecord | None:
        return self._records.get(task_id)

    def records(self) -> list[TaskRecord]:
        return list(self._records.values())

    def save(self, record: TaskRecord) -> None:
        save_record(self.paths(record.id), record)

    def load(self) -> None:
        """Take back every task a previous agent left under the data dir."""
        self.tasks_dir.mkdir(parents=True, exist_ok=True)
        network.sweep_abandoned()  # other agents', gone with their data dirs; ours are named in records
        for task_dir in sorted(self.tasks_dir.iterdir()):
            paths = TaskPaths(task_dir)
            if not paths.record.exists():
                # A submission that died before its first write, or a removal that died after its first:
                # nothing is granted or runs there, and no client will ask for it again.
                shutil.rmtree(task_dir, ignore_errors=True)
                continue
            record = read_record(paths)
            if record.status != TaskStatus.TERMINATED and paths.job_spec.exists():
                record.job_submitted = True  # its spec is written before its record says so (agent/jobs.py)
            self._records[record.id] = record
            if record.container is not None and record.status != TaskStatus.TERMINATED:
                self.executors.container.connect()  # its engine, before its container is looked for
            if record.status != TaskStatus.TERMINATED:
                self.ledger.restore(record.id, record.resources, record.gpu_indices)
            if record.status == TaskStatus.PREPARING:
                self._recover_preparing(record)  # running, or pending again if it had not started
            elif record.status == TaskStatus.RUNNING:
                self._watched.add(record.id)  # the watcher's first pass reattaches it or reports it gone
            pending = record.status == TaskStatus.PENDING
            if pending and secret_memory.lost(paths.root, record.container, paths.job_spec):
                self.finalize(record, JobTerminationReason.EXECUTOR_ERROR, secret_memory.LOST, None)
                continue
            pending_isolated = record.status == TaskStatus.PENDING and record.netns is not None
            if pending_isolated and task_network.restore(record, self.paths(record.id).record):
                self.save(record)  # its namespace was made again, at another address
        logger.info("loaded %d tasks, %d running", len(self._records), len(self._watched))

    def _recover_preparing(self, record: TaskRecord) -> None:
        """The previous agent died while starting the job: find the job it may have started. One that had
        not started is PENDING again: nothing of it ran, and the start its client retries (`run`) prepares
        and starts it (docs/jobs.md#a-restarted-agent)."""
        paths = self.paths(record.id)
        handle = self.executors.for_task(record).find_started(paths)
        if handle is None and record.stop is not None:  # stopped while it was prepared: it never starts
            stop = record.stop
            self.finalize(record, stop.reason, stop.message or stop.reason.message(), exit_status=None)
        elif handle is None:
            logger.warning("task %s: its agent died before its job started: pending again", record.id)
            record.status = TaskStatus.PENDING
            self.save(record)
        else:
            self.mark_running(record, handle, load_job_spec(paths).max_duration)

    # --- shim role -------------------------------------------------------------------------------------

    def submit(self, request: TaskSubmitRequest) -> TaskInfo:
        existing = self._records.get(request.id)
        if existing is not None:
            # Idempotent for a retry of the same request; a different one under the same id is a
            # mistake the caller must hear of, not a task silently other than the one it asked for.
            if not secret_memory.same_request(_as_submitted(existing), request):
                raise TaskConflict(f"task {request.id!r} already exists with a different request")
            return existing.to_info()  # the same id never starts a second task
        record = self.new_record(request)
        try:
            self.paths(request.id).root.mkdir(parents=True, mode=0o700, exist_ok=True)
            self.save(record)
        except BaseException:
            self.abandon(record)
            raise
        self.admit(record)
        return record.to_info()

    def new_record(self, request: TaskSubmitRequest) -> TaskRecord:
        """A new task's record, its resources taken and its network made, not yet written nor listed:
        `admit` lists it once it is on disk, `abandon` gives back what it took. Its id is held meanwhile:
        a submission of the same id is refused until then (agent/batches.py writes many at once)."""
        if request.id in self._records or request.id in self._new:
            raise TaskConflict(f"task {request.id!r} is being submitted")
        try:
            check_authorized_keys(request.authorized_keys)
        except BadAuthorizedKey as exc:
            raise BadTaskRequest(str(exc)) from exc
        # A container's own network is the engine's bridge, which the engine sets up at its start.
        isolate = request.network != "host" and request.container is None
        if request.network == "host":
            self._check_ports(request)
        try:
            gpu_indices = self.ledger.allocate(request.id, request.resources)
        except InsufficientResources as exc:
            raise TaskConflict(f"task {request.id!r} does not fit: {exc}") from exc
        isolation: network.Isolation | None = None
        try:
            if isolate:
                # Blocking, a few `ip` calls: the task's network is known, and final, once it is submitted.
                isolation = task_network.isolate(self.data_dir, request.id, self.paths(request.id).record)
                if isolation is None:
                    self._check_ports(request, " (network isolation is unavailable on this instance)")
            record = TaskRecord(
                id=request.id,
                name=request.name,
                status=TaskStatus.PENDING,
                resources=request.resources,
                gpu_indices=gpu_indices,
                ports=request.ports,
                volumes=request.volumes,
                env=request.env,
                created_at=time.time(),
                requested_network=request.network,
                network=task_network.granted_network(request, isolation),
                netns=isolation.netns if isolation is not None else None,
                address=isolation.address if isolation is not None else None,
                authorized_keys=request.authorized_keys,
                container=request.container,
                owner=request.owner,
            )
        except BaseException:
            self.ledger.release(request.id)
            if isolation is not None:
                task_network.teardown(request.id, isolation.netns)
            raise
        self._new[record.id] = record
        return record

    def admit(self, record: TaskRecord) -> None:
        """A new record (`new_record`), written: listed from now on."""
        self._new.pop(record.id, None)
        self._records[record.id] = record

    def abandon(self, record: TaskRecord) -> None:
        """A new record (`new_record`) that could not be written: what it took given back, its files gone."""
        self._new.pop(record.id, None)
        self.ledger.release(record.id)
        if record.netns is not None:
            task_network.teardown(record.id, record.netns)
        shutil.rmtree(self.paths(record.id).root, ignore_errors=True)

    def _check_ports(self, request: TaskSubmitRequest, note: str = "") -> None:
        """A port is refused only between tasks on the host's network: an isolated task has its own."""
        for port in request.ports:
            for other in [*self._records.values(), *self._new.values()]:  # a batch's others too
                if other.status != TaskStatus.TERMINATED and other.network == "host" and port in other.ports:
                    raise TaskConflict(f"port {port} is already used by task {other.id!r}{note}")

    def remove(self, task_id: str) -> TaskInfo:
        record = self.get(task_id)
        if record.status != TaskStatus.TERMINATED:
            raise TaskConflict(f"task {task_id!r} is {record.status}: terminate it before removing it")
        if record.netns is not None:
            task_network.teardown(task_id, record.netns)
        # The record first: a removal cut short leaves a directory without one, which load() removes.
        self.paths(task_id).record.unlink(missing_ok=True)
        shutil.rmtree(self.paths(task_id).root, ignore_errors=True)
        del self._records[task_id]
        self.tell(task_id)
        self._tell_ended(task_id)
        return record.to_info()

    # --- news, for the pulls that wait for it ------------------------------------------------------

    def tell(self, task_id: str) -> None:
        """Wake whoever waits on the task: it has a new job state, or it was removed."""
        news = self._news.pop(task_id, None)
        if news is not None:
            news.set()
        self.changes.changed(task_id)

    async def wait_for_news(self, task_id: str, timeout: float) -> None:
        """Until `tell(task_id)` or `timeout` seconds, whichever comes first."""
        news = self._news.get(task_id)
        if news is None:
            news = self._news[task_id] = asyncio.Event()
        await wait_set(news, timeout)

    def terminate(self, task_id: str, request: TerminateRequest) -> TaskInfo:
        record = self.get(task_id)
        if record.status == TaskStatus.TERMINATED:
            return record.to_info()
        if record.status == TaskStatus.PENDING:
            self.finalize(record, request.reason, request.message, exit_status=None)
            return record.to_info()
        self.request_stop(record, request.reason, request.message, request.timeout)
        return record.to_info()

    def request_stop(
        self, record: TaskRecord, reason: JobTerminationReason, message: str | None, timeout: float
    ) -> None:
        """SIGTERM the job's group now and SIGKILL it after `timeout` (at once when 0)."""
        now = time.time()
        first = record.stop is None
        if record.stop is None or now + timeout < record.stop.kill_at:
            # A later, shorter request wins: an abort after a graceful stop kills at once.
            record.stop = TaskStop(reason=reason, message=message, requested_at=now, kill_at=now + timeout)
        if record.status == TaskStatus.RUNNING:
            if first:
                record.job_states.append(
                    JobStateEvent(
                        state=JobStatus.TERMINATING,
                        timestamp=now,
                        termination_reason=reason,
                        termination_message=message,
                    )
                )
            if timeout == 0:
                record.stop.killed = True
            self.save(record)
            self.tell(record.id)
            signum = signal.SIGKILL if timeout == 0 else signal.SIGTERM
            self.executors.for_task(record).signal(record, signum)
            self.wake()
        else:
            self.save(record)  # preparing: the run call stops before starting the process

    # --- transitions -----------------------------------------------------------------------------------

    def mark_running(
        self, record: TaskRecord, handle: JobHandle, max_duration: int | None, inactivity: int | None = None
    ) -> None:
        now = time.time()
        record.status = TaskStatus.RUNNING
        record.pid = handle.pid
        record.pid_start_time = handle.start_time
        record.started_at = now
        record.deadline = now + max_duration if max_duration else None
        record.inactivity_duration = inactivity
        record.host_ports = handle.host_ports
        record.job_states.append(JobStateEvent(state=JobStatus.RUNNING, timestamp=now))
        self.save(record)
        self._watched.add(record.id)
        self.tell(record.id)
        if record.deadline is not None or inactivity is not None:
            self.wake()  # the watcher's next pass may be due sooner (agent/task_watch.py next_pass)

    def finalize(
        self,
        record: TaskRecord,
        reason: JobTerminationReason,
        message: str | None,
        exit_status: int | None,
        kill_strays: bool = False,
    ) -> None:
        if kill_strays:
            self.executors.for_task(record).kill_strays(record)
        message = secret_memory.masked(self.paths(record.id).root, message)
        secret_memory.forget(self.paths(record.id).root)  # the job has ended: nothing needs them now
        now = time.time()
        record.status = TaskStatus.TERMINATED
        record.termination_reason = reason
        record.termination_message = message
        record.exit_status = exit_status
        record.finished_at = now
        record.job_states.append(
            JobStateEvent(
                state=reason.to_status(),
                timestamp=now,
                termination_reason=reason,
                termination_message=message,
                exit_status=exit_status,
            )
        )
        self.ledger.release(record.id)
        self.executors.for_task(record).release(record)
        unlink_paths(record.linked_paths)
        if record.netns is not None and record.started_at is None:
            # The job never ran (a failed start, or ended before it): nothing will use the namespace.
            task_network.teardown(record.id, record.netns)
        self.save(record)
        self._watched.discard(record.id)
        self.tell(record.id)
        self._tell_ended(record.id)

    def _tell_ended(self, task_id: str) -> None:
        for listener in self.end_listeners:
            try:
                listener(task_id)
            except Exception:
                logger.exception("telling that task %s ended failed", task_id)

    def finish(self, record: TaskRecord, exit_status: int | None, kill_strays: bool) -> None:
        """The job's process exited: finished by its stop's reason, or by its exit status."""
        if record.stop is not None:
            reason, message = record.stop.reason, record.stop.message
        elif exit_status == 0:
            reason, message = JobTerminationReason.DONE_BY_RUNNER, None
        else:
            reason = JobTerminationReason.CONTAINER_EXITED_WITH_ERROR
            message = f"the job's commands exited with status {exit_status}"
        self.finalize(record, reason, message or reason.message(), exit_status, kill_strays)

    def wake(self) -> None:
        """The watcher (agent/task_watch.py) looks at the running jobs now."""
        if self._wake is not None:
            self._wake.set()

    def running(self) -> list[TaskRecord]:
        """The tasks whose jobs run (for the watcher); those that stopped running are dropped."""
        records = []
        for task_id in list(self._watched):
            record = self._records.get(task_id)
            if record is None or record.status != TaskStatus.RUNNING:
                self._watched.discard(task_id)
            else:
                records.append(record)
        return records

    def wake_on(self, event: asyncio.Event) -> None:
        self._wake = event
        loop = asyncio.get_running_loop()
        # A container's output thread wakes the watcher when the container has ended.
        self.executors.container.ended = lambda: _call_soon(loop, event.set)
