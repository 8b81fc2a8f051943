"""Doubles of the services activities (activities/services.py) and of the schedules'
(activities/schedules.py), a mixin of the workflow tests' FakeBackend; and the real watch of a run waited
for (activities/run_watch.py) over the runs the doubles stored, with the test server's client.

A replica is ready at its first probe, then its probe blocks (until the job cancels it); drains finish at
once. A load watch returns the latest LoadChange a test pushed (`push_load`) once it differs from the count
the watch was asked about (a watch the run has replaced may answer too: the run ignores it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from temporalio import activity
from temporalio.client import Client

from activities.run_watch import RunWatchActivities
from core.eventlog import Event
from core.wire import activity_names as names
from core.wire.messages import (
    CreateSchedule,
    RecordPipelineTask,
    UpdateScheduleRequest,
    WatchReply,
    WatchRunRequest,
)
from core.wire.services import (
    DrainReplica,
    DrainResult,
    LoadChange,
    ProbeReplica,
    ReplicaReadiness,
    ReplicaState,
    WatchLoad,
)

HEARTBEAT_EVERY = 0.05


class ServiceDoubles:
    def __init__(self) -> None:
        self.loads: list[LoadChange] = []
        self.load_watches: list[WatchLoad] = []
        self.schedules: dict[str, CreateSchedule] = {}  # created and not deleted, by id
        self.deleted_schedules: list[str] = []
        self.schedule_updates: list[UpdateScheduleRequest] = []
        self.pipeline_tasks: list[RecordPipelineTask] = []
        self.client: Client | None = None  # the test server's, for the watch of a run waited for

    # FakeBackend's (this is its mixin): its stored run eventlogs, its call log and its blocking steps.
    runs: dict[str, Any]
    _call: Callable[[str, str, Any], tuple[int, int, int]]
    _block: Callable[[str, tuple[int, int, int], asyncio.Event], Awaitable[None]]

    def service_activities(self) -> list[Any]:
        return [
            self.probe_replica,
            self.drain_replica,
            self.unregister_replica,
            self.watch_load,
            self.create_schedule,
            self.delete_schedule,
            self.update_schedule,
            self.watch_run,
            self.record_pipeline_task,
        ]

    @activity.defn(name=names.RECORD_PIPELINE_TASK)
    async def record_pipeline_task(self, request: RecordPipelineTask) -> None:
        self.pipeline_tasks.append(request)

    @activity.defn(name=names.WATCH_RUN)
    async def watch_run(self, request: WatchRunRequest) -> WatchReply:
        assert self.client is not None
        return await RunWatchActivities(self.client, StoredRuns(self.runs)).watch_run(request)  # type: ignore[arg-type]

    # A scheduled run's schedule (activities/schedules.py): recorded; the tests trigger cycles themselves.
    @activity.defn(name=names.CREATE_SCHEDULE)
    async def create_schedule(self, request: CreateSchedule) -> None:
        self.schedules[request.schedule_id] = request

    @activity.defn(name=names.UPDATE_SCHEDULE)
    async def update_schedule(self, request: UpdateScheduleRequest) -> None:
        self.schedule_updates.append(request)
        created = self.schedules[request.schedule_id]
        self.schedules[request.schedule_id] = created.model_copy(update={"crons": request.crons})

    @activity.defn(name=names.DELETE_SCHEDULE)
    async def delete_schedule(self, schedule_id: str) -> None:
        self.schedules.pop(schedule_id, None)
        self.deleted_schedules.append(schedule_id)

    def push_load(self, desired: int, rps: float) -> None:
        self.loads.append(LoadChange(desired=desired, rps=rps))

    @activity.defn(name=names.PROBE_REPLICA)
    async def probe_replica(self, request: ProbeReplica) -> ReplicaReadiness:
        key = self._call(names.PROBE_REPLICA, request.job_submission_id, request)
        if request.known != ReplicaState.READY:
            return ReplicaReadiness(state=ReplicaState.READY, detail="port: port open")
        await self._block(names.PROBE_REPLICA, key, asyncio.Event())
        raise AssertionError("a blocked probe only ends by its cancellation")

    @activity.defn(name=names.DRAIN_REPLICA)
    async def drain_replica(self, request: DrainReplica) -> DrainResult:
        self._call(names.DRAIN_REPLICA, request.job_submission_id, request)
        return DrainResult(drained=True, waited=0)

    @activity.defn(name=names.UNREGISTER_REPLICA)
    async def unregister_replica(self, job_submission_id: str) -> None:
        self._call(names.UNREGISTER_REPLICA, job_submission_id, job_submission_id)

    @activity.defn(name=names.WATCH_LOAD)
    async def watch_load(self, request: WatchLoad) -> LoadChange:
        self.load_watches.append(request)
        while not self.loads or self.loads[-1].desired == request.current:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY)
        return self.loads[-1]


@dataclass
class _StoredRun:
    status: str


@dataclass
class _StoredEvent:
    timestamp: float
    name: str
    context: dict[str, Any]

    def to_event(self) -> Event:
        return Event(timestamp=self.timestamp, name=self.name, context=self.context)


class StoredRuns:
    """What RunWatchActivities reads of the store, over the doubles' stored run eventlogs."""

    def __init__(self, runs: dict[str, Any]) -> None:
        self._runs = runs

    def get_run(self, run_id: str) -> _StoredRun | None:
        log = self._runs.get(run_id)
        return None if log is None else _StoredRun(status=log.status)

    def read_events(self, run_id: str, job_submission_id: None) -> list[_StoredEvent]:
        return [_StoredEvent(e.timestamp, e.name, e.context) for e in self._runs[run_id].ordered()]
