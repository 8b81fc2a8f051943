"""`ferry worker`: runs Ferry's workflows and activities on task queue `ferry` (the fleets' schedulers on
`ferry-fleets`) until SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.elements import ElementActivities
from activities.fleet import FleetActivities, InstanceResolver
from activities.instance_watch import InstanceWatchActivities
from activities.instances import LOCAL_INSTANCE, InstanceDirectory
from activities.jobs import JobActivities
from activities.metrics import MetricsActivities
from activities.notifications import NotificationActivities
from activities.provisioning import ProvisioningActivities, SlurmBackends
from activities.records import RecordActivities
from activities.run_watch import RunWatchActivities
from activities.schedules import ScheduleActivities
from activities.services import ServiceActivities
from activities.signals import SignalActivities
from activities.ssh import HostPool
from activities.ssh_config import DeployOptions
from activities.stuck_stop import StuckStopActivities
from activities.volumes import VolumeActivities
from core.configuration.notifications import private_webhooks_allowed
from core.settings import TASK_QUEUE, Settings, fleet_task_queue
from core.wire.volumes import HostDirs
from embedded.local_agent import agent_data_dir, local_agent_client
from store import Store, open_store
from worker.local_fleets import tell_local_fleets
from worker.temporal import connect_from_settings
from workflows.cycle import CycleWorkflow
from workflows.elements import ElementsWorkflow
from workflows.fleet import FleetWorkflow
from workflows.job import JobWorkflow
from workflows.metrics import MetricsWorkflow
from workflows.notify import NotifyWorkflow
from workflows.pipeline import PipelineWorkflow
from workflows.run import RunWorkflow
from workflows.stuck_stop import StuckStopWorkflow

WORKFLOWS: Sequence[type] = (
    RunWorkflow,
    JobWorkflow,
    ElementsWorkflow,
    FleetWorkflow,
    CycleWorkflow,
    PipelineWorkflow,
    MetricsWorkflow,
    NotifyWorkflow,
    StuckStopWorkflow,
)
# Per-call timeout for agent requests: short, so a lost host is noticed within the watch's threshold.
AGENT_REQUEST_TIMEOUT = 5.0


def activities_for(
    instances: InstanceDirectory,
    store: Store,
    client: Client,
    task_queue: str,
    allow_private_webhooks: bool = False,  # docs/deployment.md#webhooks
) -> list[Callable[..., Any]]:
    schedules = ScheduleActivities(client, task_queue)
    watches = RunWatchActivities(client, store)
    jobs = JobActivities(instances, store)
    elements = ElementActivities(jobs)
    instance_watches = InstanceWatchActivities(instances, store, client)
    records = RecordActivities(store)
    fleets = FleetActivities(instances, store)
    backends = SlurmBackends(store, instances)
    instances.closing(backends.aclose)
    provisioning = ProvisioningActivities(instances, backends)
    services = ServiceActivities(instances, store, login_nodes=backends)
    volumes = VolumeActivities(store)
    metrics = MetricsActivities(instances)
    notifications = NotificationActivities(store, allow_private=allow_private_webhooks)
    stuck_stops = StuckStopActivities(client, instances, store)
    signals = SignalActivities(client)
    # A host this worker has not deployed (a fleet older than the worker) is found through the store.
    instances.set_resolver(InstanceResolver(instances, store, backends))
    return [
        records.record_run,
        records.record_pipeline_task,
        jobs.prepare_task,
        jobs.start_job,
        jobs.prepare_and_start,
        jobs.watch_job,
        instance_watches.watch_instance,
        jobs.stop_task,
        jobs.ssh_endpoint,
        metrics.task_metrics,
        metrics.watch_utilization,
        jobs.release_task,
        elements.start_many,
        elements.stop_many,
        elements.remove_many,
        volumes.attach_volumes,
        volumes.detach_volumes,
        fleets.local_instance,
        fleets.deploy_instance,
        fleets.watch_fleet_health,
        fleets.watch_local_instance,
        fleets.clean_instance,
        fleets.record_fleet,
        fleets.stop_fleet,
        provisioning.create_group,
        provisioning.watch_groups,
        provisioning.start_group,
        provisioning.release_group,
        services.probe_replica,
        services.drain_replica,
        services.unregister_replica,
        services.watch_load,
        services.router_address,
        schedules.create_schedule,
        schedules.delete_schedule,
        schedules.update_schedule,
        watches.watch_run,
        notifications.deliver_notification,
        stuck_stops.end_run_workflows,
        stuck_stops.remove_run_tasks,
        stuck_stops.record_stuck_stop,
        signals.send_signals,
    ]


def ssh_options(settings: Settings) -> DeployOptions:
    """How this worker deploys to SSH hosts: FERRY_SSH_KNOWN_HOSTS and FERRY_SSH_PYTHON, see Settings."""
    return DeployOptions(
        python=settings.ssh_python,
        known_hosts=settings.ssh_known_hosts,
        bundle_cache=settings.home / "agent-bundles",
    )


def local_instances(settings: Settings, ssh: DeployOptions | None = None) -> InstanceDirectory:
    """The local agent (started if none runs), and the pool SSH fleets' hosts join (one per worker)."""
    instances = InstanceDirectory()
    # It follows the agent through restarts (docs/jobs.md#a-restarted-agent).
    instances.add(LOCAL_INSTANCE, local_agent_client(settings.home, timeout=AGENT_REQUEST_TIMEOUT))
    # The local agent runs as this user, started by a worker or the stack with this environment.
    home = os.path.expanduser("~")
    instances.set_dirs(LOCAL_INSTANCE, HostDirs(home=home, data_dir=str(agent_data_dir(settings.home))))
    instances.pool = HostPool(ssh or ssh_options(settings), on_client=instances.add)
    return instances


# Every running job holds an activity slot for its whole life (its watch), and every fleet one (its health
# watch): with 1000 slots, 1000 running jobs left none for any other step, and a new run waited forever for
# its first store write (`python -m bench.run --scale 1000`). Watches mostly wait on their agent, so a slot
# costs little; the CPU, not this number, bounds the work in flight.
MAX_CONCURRENT_ACTIVITIES = 20_000
# Activations run in threads under one GIL, and the SDK takes one not done 2 s after it was handed over for a
# deadlock (TMPRL1101), which leaves its workflow stuck on this worker: the slots bound how many share the
# CPU at once. 100 slots stalled 10,000 runs at 805 RUNNING; 32, with the cache below, brought all
# 10,000 up (docs/scaling.md#many-runs-at-once).
MAX_CONCURRENT_WORKFLOW_TASKS = 32
# A quiet workflow (a running job waiting for its end) needs no place in the cache: evicted, it is replayed
# when it next hears something. Each cached workflow holds about 140 KB, so the cache, not the number of
# runs, bounds the worker's memory (10,000 runs: 572 MB, against 994 MB for 3,000 with a cache of 10,000).
# The 500 burst's active workflows (two per run in flight) fit in it.
MAX_CACHED_WORKFLOWS = 2_000


# The fleets' queue: a fleet's workflow task is one step of its scheduler, and one runs at a time per fleet;
# a few slots let several fleets step at once without taking the CPU from the runs.
FLEET_WORKFLOW_TASKS = 4
FLEET_CACHED_WORKFLOWS = 100

# How long a workflow task waits for the worker that has its workflow cached before any worker may take it
# and replay the whole history (the SDK's default is 10 s). In a burst the queue is longer than that: with
# 10 s, two workers replayed each other's workflows and did 0.79x one worker's runs/s, at 1.3x its CPU
# per run (docs/scaling.md#several-workers). A worker shut down hands its tasks back at once; one
# SIGKILLed leaves those already queued to it waiting this long.
STICKY_QUEUE_TIMEOUT = timedelta(seconds=60)


class FerryWorker:
    """The worker: one Temporal worker on the task queue, one on the fleets' queue beside it (both in this
    process, on the same activities); `async with` runs both."""

    def __init__(self, workers: Sequence[Worker]) -> None:
        self.workers = list(workers)
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> FerryWorker:
        async with contextlib.AsyncExitStack() as stack:
            for worker in self.workers:
                await stack.enter_async_context(worker)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stack.aclose()


def build_worker(
    client: Client,
    instances: InstanceDirectory,
    store: Store,
    *,
    task_queue: str = TASK_QUEUE,
    sandboxed: bool = False,
    allow_private_webhooks: bool = False,
) -> FerryWorker:
    """The worker. Unsandboxed by default: the SDK's sandbox re-imports each workflow's module for every
    new workflow and runs payload conversion inside it, which cost about a third of the worker's CPU
    (py-spy, `python -m bench.run --profile`). Ferry's workflows import only `core`'s pure modules, the
    workflow tests run them in the sandbox, and recorded histories are replayed there.

    FleetWorkflow is served on both queues: a fleet started before the fleets had their own queue goes on
    where it began until it continues as new onto the fleets' queue."""
    activities = activities_for(instances, store, client, task_queue, allow_private_webhooks)
    runner = SandboxedWorkflowRunner() if sandboxed else UnsandboxedWorkflowRunner()
    common: dict[str, Any] = {
        "activities": activities,
        "workflow_runner": runner,
        "max_concurrent_activities": MAX_CONCURRENT_ACTIVITIES,
        "graceful_shutdown_timeout": timedelta(seconds=5),
        "sticky_queue_schedule_to_start_timeout": STICKY_QUEUE_TIMEOUT,
    }
    main = Worker(
        client,
        task_queue=task_queue,
        workflows=list(WORKFLOWS),
        max_concurrent_workflow_tasks=MAX_CONCURRENT_WORKFLOW_TASKS,
        max_cached_workflows=MAX_CACHED_WORKFLOWS,
        **common,
    )
    fleets = Worker(
        client,
        task_queue=fleet_task_queue(task_queue),
        workflows=[FleetWorkflow],
        max_concurrent_workflow_tasks=FLEET_WORKFLOW_TASKS,
        max_cached_workflows=FLEET_CACHED_WORKFLOWS,
        **common,
    )
    return FerryWorker([main, fleets])


async def run_worker(
    settings: Settings, on_ready: Callable[[], object] | None = None, embedded: bool = False
) -> None:
    """Serves until SIGTERM or SIGINT; `on_ready` is called once the worker polls its task queue.
    `embedded`: the embedded stack's worker, which posts to private webhooks unless told not to."""
    client = await connect_from_settings(settings)
    store = open_store(settings.database_url)
    # Starting the local agent waits for its healthcheck: not on the event loop.
    instances = await asyncio.to_thread(local_instances, settings)
    try:
        await tell_local_fleets(client, store, instances)  # before any run submitted after this start
        allow_private = private_webhooks_allowed(settings.webhooks_allow_private, embedded)
        worker = build_worker(
            client,
            instances,
            store,
            sandboxed=settings.workflow_sandbox,
            allow_private_webhooks=allow_private,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        async with worker:
            if on_ready is not None:
                on_ready()
            await stop.wait()
    finally:
        await instances.aclose()
