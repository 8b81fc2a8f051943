"""The activities as workflows call them: one typed declaration per activity, by reference
(`workflow.execute_activity(activity_stubs.start_job, StartJobRequest(...), ...)`), so that the type
checker holds every call to its message in and its result out.

Each is declared here, not imported from `activities/`, because the implementations are methods of
classes that hold the worker's store, agents and SSH hosts, and their modules import all of that (asyncssh
among it): a workflow module, which `ferry ps` imports for its workflow's name, would carry them too. The
worker registers the implementations under the same names (`@activity.defn(name=names.START_JOB)` on
`JobActivities.start_job`), and Temporal dispatches by name, so a call to the declaration runs the
implementation, or a workflow test's double registered under that name. tests/workflows/test_activity_stubs.py
holds each declaration to its implementation: the same name, the same message in, the same result out.

A declaration's body never runs. Names and messages are the contract with running workflows and recorded
histories: neither changes here (docs/upgrades.md).
"""

from __future__ import annotations

from temporalio import activity

from core.fleets.growth import CreateGroup, GroupCall, GroupNews, StartGroup, WatchGroups
from core.fleets.messages import (
    CleanInstance,
    DeployInstance,
    HealthReport,
    LocalInstance,
    RecordFleet,
    StopFleet,
    WatchFleet,
    WatchLocal,
)
from core.fleets.placement import InstanceSlot
from core.notifications import Delivery
from core.wire import activity_names as names
from core.wire.element_messages import RemovedTasks, RemoveMany, StartedTasks, StartMany, StopMany
from core.wire.messages import (
    CreateSchedule,
    JobOutcome,
    MetricsReply,
    MetricsRequest,
    PrepareAndStart,
    PrepareTask,
    RecordPipelineTask,
    RecordRun,
    SendSignals,
    SSHEndpoint,
    SSHEndpointRequest,
    StartJobRequest,
    StopTask,
    TaskRef,
    UpdateScheduleRequest,
    UtilizationNews,
    WatchInstance,
    WatchJob,
    WatchReply,
    WatchRunRequest,
    WatchUtilization,
)
from core.wire.run_messages import StopReply
from core.wire.services import (
    DrainReplica,
    DrainResult,
    LoadChange,
    ProbeReplica,
    ReplicaReadiness,
    RouterAddressRequest,
    WatchLoad,
)
from core.wire.stuck_stop import (
    EndRunWorkflows,
    RecordStuckStop,
    RemoveRunTasks,
    RunTasksRemoved,
    RunWorkflowsEnded,
)
from core.wire.volumes import AttachVolumes, DetachVolumes


def _declared() -> NotImplementedError:
    return NotImplementedError("a declaration: the worker runs the activity registered under its name")


# --- a job on its agent (activities/jobs.py, activities/instance_watch.py, activities/volumes.py) --------


@activity.defn(name=names.PREPARE_TASK)
async def prepare_task(request: PrepareTask) -> None:
    raise _declared()


@activity.defn(name=names.START_JOB)
async def start_job(request: StartJobRequest) -> str | None:
    """The job's published ports, if its container's are published on other host ports."""
    raise _declared()


@activity.defn(name=names.PREPARE_AND_START)
async def prepare_and_start(request: PrepareAndStart) -> str | None:
    """Both in one, for a job with nothing to wait for between them (docs/jobs.md#one-step-start)."""
    raise _declared()


@activity.defn(name=names.WATCH_JOB)
async def watch_job(request: WatchJob) -> JobOutcome:
    """A job's own watch, as workflows begun before the instance watch have it."""
    raise _declared()


@activity.defn(name=names.WATCH_INSTANCE)
async def watch_instance(request: WatchInstance) -> None:
    """Every job's on one instance (docs/jobs.md#the-instance-watch)."""
    raise _declared()


@activity.defn(name=names.STOP_TASK)
async def stop_task(request: StopTask) -> None:
    raise _declared()


@activity.defn(name=names.RELEASE_TASK)
async def release_task(ref: TaskRef) -> None:
    raise _declared()


@activity.defn(name=names.START_MANY)
async def start_many(request: StartMany) -> StartedTasks:
    """An array's elements' PREPARE_AND_START, each answered on its own (activities/elements.py)."""
    raise _declared()


@activity.defn(name=names.STOP_MANY)
async def stop_many(request: StopMany) -> None:
    raise _declared()


@activity.defn(name=names.REMOVE_MANY)
async def remove_many(request: RemoveMany) -> RemovedTasks:
    raise _declared()


@activity.defn(name=names.SSH_ENDPOINT)
async def ssh_endpoint(request: SSHEndpointRequest) -> SSHEndpoint:
    """`ferry attach`: the way into a running job (docs/attach.md)."""
    raise _declared()


@activity.defn(name=names.TASK_METRICS)
async def task_metrics(request: MetricsRequest) -> MetricsReply:
    """`ferry metrics`: running jobs' CPU, memory and GPU use (docs/jobs.md#metrics)."""
    raise _declared()


@activity.defn(name=names.WATCH_UTILIZATION)
async def watch_utilization(watch: WatchUtilization) -> UtilizationNews:
    """A job's GPUs sampled until its utilization_policy has news (docs/jobs.md#utilization-policy)."""
    raise _declared()


@activity.defn(name=names.ATTACH_VOLUMES)
async def attach_volumes(request: AttachVolumes) -> None:
    """A job's named volumes, taken once it is placed (docs/volumes.md)."""
    raise _declared()


@activity.defn(name=names.DETACH_VOLUMES)
async def detach_volumes(request: DetachVolumes) -> None:
    """And freed once its process has ended."""
    raise _declared()


# --- the store (activities/records.py) ------------------------------------------------------------------


@activity.defn(name=names.RECORD_RUN)
async def record_run(record: RecordRun) -> None:
    raise _declared()


@activity.defn(name=names.RECORD_PIPELINE_TASK)
async def record_pipeline_task(request: RecordPipelineTask) -> None:
    raise _declared()


# --- the fleet scheduler's effects (activities/fleet.py) ------------------------------------------------


@activity.defn(name=names.LOCAL_INSTANCE)
async def local_instance(request: LocalInstance) -> InstanceSlot:
    raise _declared()


@activity.defn(name=names.DEPLOY_INSTANCE)
async def deploy_instance(request: DeployInstance) -> InstanceSlot:
    raise _declared()


@activity.defn(name=names.CLEAN_INSTANCE)
async def clean_instance(request: CleanInstance) -> None:
    raise _declared()


@activity.defn(name=names.WATCH_FLEET_HEALTH)
async def watch_fleet_health(request: WatchFleet) -> HealthReport:
    raise _declared()


@activity.defn(name=names.WATCH_LOCAL_INSTANCE)
async def watch_local_instance(request: WatchLocal) -> HealthReport:
    raise _declared()


# --- an elastic fleet's backend (activities/provisioning.py) ----------------------------------------------


@activity.defn(name=names.CREATE_GROUP)
async def create_group(request: CreateGroup) -> GroupNews:
    raise _declared()


@activity.defn(name=names.WATCH_GROUPS)
async def watch_groups(request: WatchGroups) -> list[GroupNews]:
    raise _declared()


@activity.defn(name=names.START_GROUP)
async def start_group(request: StartGroup) -> GroupNews:
    raise _declared()


@activity.defn(name=names.RELEASE_GROUP)
async def release_group(request: GroupCall) -> GroupNews:
    raise _declared()


@activity.defn(name=names.RECORD_FLEET)
async def record_fleet(request: RecordFleet) -> None:
    raise _declared()


@activity.defn(name=names.STOP_FLEET)
async def stop_fleet(request: StopFleet) -> None:
    raise _declared()


# --- services: readiness, draining and load (activities/services.py) ------------------------------------


@activity.defn(name=names.PROBE_REPLICA)
async def probe_replica(request: ProbeReplica) -> ReplicaReadiness:
    raise _declared()


@activity.defn(name=names.DRAIN_REPLICA)
async def drain_replica(request: DrainReplica) -> DrainResult:
    raise _declared()


@activity.defn(name=names.UNREGISTER_REPLICA)
async def unregister_replica(job_submission_id: str) -> None:
    raise _declared()


@activity.defn(name=names.ROUTER_ADDRESS)
async def router_address(request: RouterAddressRequest) -> str:
    raise _declared()


@activity.defn(name=names.WATCH_LOAD)
async def watch_load(request: WatchLoad) -> LoadChange:
    raise _declared()


# --- a scheduled run's Temporal Schedule (activities/schedules.py) --------------------------------------


@activity.defn(name=names.CREATE_SCHEDULE)
async def create_schedule(request: CreateSchedule) -> None:
    raise _declared()


@activity.defn(name=names.UPDATE_SCHEDULE)
async def update_schedule(request: UpdateScheduleRequest) -> None:
    raise _declared()


@activity.defn(name=names.DELETE_SCHEDULE)
async def delete_schedule(schedule_id: str) -> None:
    raise _declared()


# --- runs that wait for others, notifications, signals (activities/run_watch.py, notifications.py, ------
# --- signals.py) ----------------------------------------------------------------------------------------


@activity.defn(name=names.WATCH_RUN)
async def watch_run(request: WatchRunRequest) -> WatchReply:
    raise _declared()


@activity.defn(name=names.DELIVER_NOTIFICATION)
async def deliver_notification(delivery: Delivery) -> int:
    """A run's webhook called (docs/runs.md#notifications); the HTTP status it answered."""
    raise _declared()


@activity.defn(name=names.SEND_SIGNALS)
async def send_signals(request: SendSignals) -> list[bool]:
    """Whether each signal was delivered."""
    raise _declared()


# --- a stuck run stopped from outside (activities/stuck_stop.py, docs/upgrades.md#stopping-a-stuck-run) --


@activity.defn(name=names.END_RUN_WORKFLOWS)
async def end_run_workflows(request: EndRunWorkflows) -> RunWorkflowsEnded:
    raise _declared()


@activity.defn(name=names.REMOVE_RUN_TASKS)
async def remove_run_tasks(request: RemoveRunTasks) -> RunTasksRemoved:
    raise _declared()


@activity.defn(name=names.RECORD_STUCK_STOP)
async def record_stuck_stop(request: RecordStuckStop) -> StopReply:
    raise _declared()
