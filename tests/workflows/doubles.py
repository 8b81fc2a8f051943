"""Activity doubles for workflow tests: registered under the real activities' names, scripted per test.

Each job submission is known by its (replica, job, submission) key. A test scripts how prepare_task,
start_job and the job's watch behave for a key; stop_task ends a blocked watch the way the real agent does
(the job ends for the stop's reason), and record_run keeps the flushed eventlogs (the run's and its
jobs') in memory, first write winning per sequence number, as the store does.

Placement is the real FleetWorkflow's: the fleet doubles give it instances (the local one, and SSH hosts
`instances` scripts by index), and report health changes that a test pushes (`report_health`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from core.eventlog import Event
from core.fleets.book import instance_name
from core.fleets.messages import (
    CleanInstance,
    DeployInstance,
    HealthReport,
    InstanceChange,
    LocalInstance,
    RecordFleet,
    StopFleet,
    WatchFleet,
    WatchLocal,
)
from core.fleets.placement import InstanceSlot
from core.status import JobTerminationReason
from core.wire import activity_names as names
from core.wire.agent_api import Resources
from core.wire.messages import (
    TASK_ENDED,
    JobOutcome,
    PrepareAndStart,
    PrepareTask,
    RecordJob,
    RecordRun,
    SSHEndpoint,
    SSHEndpointRequest,
    StartJobRequest,
    StopTask,
    TaskRef,
    WatchInstance,
    WatchJob,
)
from core.wire.volumes import AttachVolumes, DetachVolumes
from tests.workflows.service_doubles import ServiceDoubles

Key = tuple[int, int, int]  # (replica, job, submission)
_KEY = re.compile(r"-r(\d+)-j(\d+)-s(\d+)$")
HEARTBEAT_EVERY = 0.05

# How a scripted activity behaves for one job submission.
BLOCK = "block"  # prepare_task: until cancelled; watch_job: until stop_task or finish_watch
TRAP = "trap"  # watch_job: a job that ignores SIGTERM, so only a stop with timeout 0 (abort) ends it


def key_of(job_submission_id: str) -> Key:
    found = _KEY.search(job_submission_id)
    assert found is not None, job_submission_id
    replica, job, submission = (int(g) for g in found.groups())
    return replica, job, submission


def exited(status: int) -> JobOutcome:
    """The job's commands exited by themselves with `status`."""
    if status == 0:
        return JobOutcome(termination_reason=JobTerminationReason.DONE_BY_RUNNER, exit_status=0)
    return JobOutcome(
        termination_reason=JobTerminationReason.CONTAINER_EXITED_WITH_ERROR,
        termination_message=f"exited with status {status}",
        exit_status=status,
    )


# The local instance of the doubles: a job asking for more CPUs than this can never be placed.
LOCAL_CPUS = 64


def host_slot(name: str, index: int, fleet: str, cpu: float = 8, blocks: int | None = 1) -> InstanceSlot:
    """An SSH host of the doubles, at 10.0.0.<index + 1>."""
    return InstanceSlot(
        name=name,
        address=f"10.0.0.{index + 1}",
        total=Resources(cpu=cpu, memory=32),
        blocks=blocks,
        fleet=fleet,
    )


@dataclass
class Log:
    """An eventlog as the store keeps it: events by sequence number, and the last status written."""

    events: dict[int, Event] = field(default_factory=dict)
    status: str | None = None
    reason: str | None = None
    configurations: list[str] = field(default_factory=list)  # a run's, each time it recorded a new one
    priorities: list[int] = field(default_factory=list)
    order: int | None = None  # the place of the last write that stored a run's events (RecordRun.order)

    def takes(self, order: int | None, start_seq: int) -> bool:
        """Store.record_changes's rule: a later write replaces the run's events from its first seq on, an
        earlier one (a refused workflow task's) changes nothing."""
        if order is None:
            return True
        if self.order is not None and order < self.order:
            return False
        if self.order is None or order > self.order:
            self.events = {seq: event for seq, event in self.events.items() if seq < start_seq}
        self.order = order
        return True

    def append(self, start_seq: int, events: list[Event]) -> None:
        for n, event in enumerate(events, start=start_seq):
            self.events.setdefault(n, event)

    def ordered(self) -> list[Event]:
        assert sorted(self.events) == list(range(len(self.events))), "the stored eventlog has a gap"
        return [self.events[n] for n in range(len(self.events))]


class FakeBackend(ServiceDoubles):
    """The activity doubles, and what they were asked to do (`calls`, in order)."""

    def __init__(self) -> None:
        super().__init__()
        # Scripts, by job submission key; a missing key: the job starts and exits 0.
        self.prepare_script: dict[Key, str | float] = {}  # BLOCK, or the seconds the step takes
        self.start_script: dict[Key, Callable[[], ApplicationError]] = {}
        self.attach_script: dict[Key, Callable[[], ApplicationError]] = {}
        self.detach_broken: set[Key] = set()  # detach_volumes fails (and is retried) while a key is here
        self.watch_script: dict[Key, JobOutcome | str] = {}
        # The same, for one run's jobs only (several runs, e.g. a pipeline's tasks, share their keys).
        self.run_watch_script: dict[str, dict[Key, JobOutcome | str]] = {}
        self.calls: list[tuple[str, Key, Any]] = []
        self.cancelled: list[tuple[str, Key]] = []
        self.runs: dict[str, Log] = {}
        self.jobs: dict[Key, Log] = {}
        # The seconds each of the next local record_run calls takes (workflows/run_records.py), in order.
        self.slow_local_writes: list[float] = []
        self.local_writes = 0
        self._ends: dict[Key, asyncio.Event] = {}
        self._outcomes: dict[Key, JobOutcome] = {}
        # SSH fleets: the hosts' slots by index (an error string: that host fails to deploy).
        self.hosts: dict[int, InstanceSlot | str] = {}
        self.health: asyncio.Queue[InstanceChange] = asyncio.Queue()
        self.local_health: asyncio.Queue[InstanceChange] = asyncio.Queue()
        self.local_watches: list[WatchLocal] = []
        self.fleet_records: dict[str, RecordFleet] = {}  # each fleet's last
        self.queues_recorded: list[list[str] | None] = []  # every record's queue, in order
        self.cleaned: list[CleanInstance] = []
        self.stopped: list[str] = []
        # Jobs started whose end an instance watch tells: (job submission id, instance, owner).
        self._owners: dict[str, str] = {}
        self._started: list[tuple[str, str, str]] = []
        self._released: set[str] = set()

    def activities(self) -> list[Callable[..., Any]]:
        return [
            self.record_run,
            self.local_instance,
            self.deploy_instance,
            self.watch_fleet_health,
            self.watch_local_instance,
            self.clean_instance,
            self.record_fleet,
            self.stop_fleet,
            self.prepare_task,
            self.start_job,
            self.prepare_and_start,
            self.watch_job,
            self.watch_instance,
            self.stop_task,
            self.release_task,
            self.ssh_endpoint,
            self.attach_volumes,
            self.detach_volumes,
            *self.service_activities(),
        ]

    def called(self, name: str, key: Key | None = None) -> list[Any]:
        """The arguments of every call to activity `name` (for one job submission, if `key` is given)."""
        return [arg for n, k, arg in self.calls if n == name and (key is None or k == key)]

    def finish_watch(self, key: Key, outcome: JobOutcome) -> None:
        """A blocked watch returns `outcome`: the job's process ended by itself."""
        self._end(key, outcome)

    def _end(self, key: Key, outcome: JobOutcome) -> None:
        self._outcomes.setdefault(key, outcome)
        self._ends.setdefault(key, asyncio.Event()).set()

    def _call(self, name: str, job_submission_id: str, arg: Any) -> Key:
        key = key_of(job_submission_id)
        self.calls.append((name, key, arg))
        return key

    # --- the store ----------------------------------------------------------------------------------

    @activity.defn(name=names.RECORD_RUN)
    async def record_run(self, record: RecordRun) -> None:
        if activity.info().is_local:
            self.local_writes += 1
            if self.slow_local_writes:
                await asyncio.sleep(self.slow_local_writes.pop(0))
        log = self.runs.setdefault(record.run_id, Log())
        if not log.takes(record.order, record.start_seq):
            return
        log.append(record.start_seq, record.events)
        log.status = record.status.value
        log.reason = record.termination_reason.value if record.termination_reason else None
        # A field set again to what it holds changes nothing (a write may carry an unended one's).
        if record.configuration is not None and log.configurations[-1:] != [record.configuration]:
            log.configurations.append(record.configuration)
        if record.priority is not None and log.priorities[-1:] != [record.priority]:
            log.priorities.append(record.priority)
        for job in record.jobs:
            self._record_job(job)

    def _record_job(self, record: RecordJob) -> None:
        log = self.jobs.setdefault(key_of(record.job_submission_id), Log())
        log.append(record.start_seq, record.events)
        log.status = record.status.value
        log.reason = record.termination_reason.value if record.termination_reason else None

    # --- the backend and the agent ------------------------------------------------------------------

    @activity.defn(name=names.LOCAL_INSTANCE)
    async def local_instance(self, request: LocalInstance) -> InstanceSlot:
        total = Resources(cpu=LOCAL_CPUS, memory=256)
        return InstanceSlot(name="local", address="127.0.0.1", total=total, blocks=None, fleet=request.fleet)

    @activity.defn(name=names.DEPLOY_INSTANCE)
    async def deploy_instance(self, request: DeployInstance) -> InstanceSlot:
        name = instance_name(request.fleet, request.index)
        script = self.hosts.get(request.index, host_slot(name, request.index, request.fleet))
        if isinstance(script, str):
            raise ApplicationError(script, type="SSHUnreachable", non_retryable=True)
        return script

    @activity.defn(name=names.WATCH_FLEET_HEALTH)
    async def watch_fleet_health(self, request: WatchFleet) -> HealthReport:
        """Until a test reports a change (`report_health`) about an instance this watch looks after."""
        watched = {*request.ready, *request.unreachable}
        while True:
            activity.heartbeat()
            try:
                change = await asyncio.wait_for(self.health.get(), HEARTBEAT_EVERY)
            except TimeoutError:
                continue
            if change.name in watched:
                return HealthReport(changes=[change])

    @activity.defn(name=names.WATCH_LOCAL_INSTANCE)
    async def watch_local_instance(self, request: WatchLocal) -> HealthReport:
        """Until a test reports a change (`report_health`) about the local instance."""
        self.local_watches.append(request)
        while True:
            activity.heartbeat()
            try:
                change = await asyncio.wait_for(self.local_health.get(), HEARTBEAT_EVERY)
            except TimeoutError:
                continue
            return HealthReport(changes=[change])

    def report_health(self, change: InstanceChange) -> None:
        (self.local_health if change.name == "local" else self.health).put_nowait(change)

    @activity.defn(name=names.CLEAN_INSTANCE)
    async def clean_instance(self, request: CleanInstance) -> None:
        self.cleaned.append(request)

    @activity.defn(name=names.RECORD_FLEET)
    async def record_fleet(self, request: RecordFleet) -> None:
        self.fleet_records[request.fleet] = request
        self.queues_recorded.append(request.waiting)

    @activity.defn(name=names.STOP_FLEET)
    async def stop_fleet(self, request: StopFleet) -> None:
        self.stopped.append(request.fleet)

    @activity.defn(name=names.PREPARE_TASK)
    async def prepare_task(self, request: PrepareTask) -> None:
        key = self._call(names.PREPARE_TASK, request.job_submission_id, request)
        if request.owner is not None:
            self._owners[request.job_submission_id] = request.owner
        script = self.prepare_script.get(key)
        if script == BLOCK:
            await self._block(names.PREPARE_TASK, key, asyncio.Event())
        elif isinstance(script, float):
            await asyncio.sleep(script)

    @activity.defn(name=names.START_JOB)
    async def start_job(self, request: StartJobRequest) -> None:
        key = self._call(names.START_JOB, request.job_submission_id, request)
        if key in self.start_script:
            raise self.start_script[key]()
        owner = self._owners.get(request.job_submission_id)
        if owner is not None and request.job_submission_id not in {s[0] for s in self._started}:
            self._started.append((request.job_submission_id, request.instance_name, owner))

    @activity.defn(name=names.PREPARE_AND_START)
    async def prepare_and_start(self, request: PrepareAndStart) -> None:
        """As the real one: the two steps above, scripted as they are, recorded as this call and theirs."""
        self._call(names.PREPARE_AND_START, request.prepare.job_submission_id, request)
        await self.prepare_task(request.prepare)
        await self.start_job(request.start)

    @activity.defn(name=names.WATCH_INSTANCE)
    async def watch_instance(self, request: WatchInstance) -> None:
        """As the real one: each started job of its instance and project followed (recorded as a call of
        WATCH_JOB, scripted the same way), its end signalled to its workflow."""
        handled: set[str] = set()
        following: set[asyncio.Task[None]] = set()
        try:
            while True:
                activity.heartbeat()
                for job_id, instance, owner in list(self._started):
                    mine = instance == request.instance_name and owner.startswith(request.owners)
                    if mine and job_id not in handled and job_id not in self._released:
                        handled.add(job_id)
                        watch = WatchJob(job_submission_id=job_id, instance_name=instance)
                        following.add(asyncio.create_task(self._follow(watch, owner)))
                await asyncio.sleep(HEARTBEAT_EVERY)
        finally:
            for follow in following:
                follow.cancel()

    async def _follow(self, request: WatchJob, owner: str) -> None:
        outcome = await self._watched(request)
        await activity.client().get_workflow_handle(owner).signal(TASK_ENDED, outcome)

    @activity.defn(name=names.WATCH_JOB)
    async def watch_job(self, request: WatchJob) -> JobOutcome:
        return await self._watched(request)

    async def _watched(self, request: WatchJob) -> JobOutcome:
        key = self._call(names.WATCH_JOB, request.job_submission_id, request)
        run_id = _KEY.sub("", request.job_submission_id)
        script = self.run_watch_script.get(run_id, {}).get(key) or self.watch_script.get(key, exited(0))
        if isinstance(script, JobOutcome):
            return script
        ended = self._ends.setdefault(key, asyncio.Event())
        if activity.info().activity_type == names.WATCH_JOB:
            await self._block(names.WATCH_JOB, key, ended)
        else:
            await ended.wait()  # the instance watch heartbeats for all its jobs
        return self._outcomes[key]

    @activity.defn(name=names.SSH_ENDPOINT)
    async def ssh_endpoint(self, request: SSHEndpointRequest) -> SSHEndpoint:
        self._call(names.SSH_ENDPOINT, request.job_submission_id, request)
        return SSHEndpoint(
            instance_name=request.instance_name,
            port=2222,
            host_key="ssh-ed25519 AAAA",
            user=request.job_submission_id,
        )

    @activity.defn(name=names.STOP_TASK)
    async def stop_task(self, request: StopTask) -> None:
        key = self._call(names.STOP_TASK, request.job_submission_id, request)
        if self.watch_script.get(key) == TRAP and request.timeout > 0:
            return
        # As the real agent does: a stopped job ends for the stop's reason; given a grace period, it
        # exits 143 on SIGTERM, and killed at once it has no exit status of its own.
        self._end(
            key,
            JobOutcome(
                termination_reason=request.reason,
                termination_message=request.message,
                exit_status=143 if request.timeout > 0 else None,
            ),
        )

    @activity.defn(name=names.RELEASE_TASK)
    async def release_task(self, ref: TaskRef) -> None:
        self._call(names.RELEASE_TASK, ref.job_submission_id, ref)
        self._released.add(ref.job_submission_id)

    @activity.defn(name=names.ATTACH_VOLUMES)
    async def attach_volumes(self, request: AttachVolumes) -> None:
        key = self._call(names.ATTACH_VOLUMES, request.job_submission_id, request)
        if key in self.attach_script:
            raise self.attach_script[key]()

    @activity.defn(name=names.DETACH_VOLUMES)
    async def detach_volumes(self, request: DetachVolumes) -> None:
        key = self._call(names.DETACH_VOLUMES, request.job_submission_id, request)
        if key in self.detach_broken:
            raise ApplicationError("the store is unreachable", type="StoreUnreachable")  # retried

    async def _block(self, name: str, key: Key, until: asyncio.Event) -> None:
        """Heartbeat until `until` is set; a cancellation is recorded, then re-raised."""
        try:
            while not until.is_set():
                activity.heartbeat()
                await asyncio.sleep(HEARTBEAT_EVERY)
        except asyncio.CancelledError:
            self.cancelled.append((name, key))
            raise
