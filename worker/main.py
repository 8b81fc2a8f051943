"""`ferry worker`: runs Ferry's workflows and activities on task queue `ferry` until SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.agent_client import AgentClient
from activities.instances import LOCAL_INSTANCE, InstanceDirectory
from activities.jobs import JobActivities
from activities.records import RecordActivities
from core.settings import TASK_QUEUE, Settings
from store import Store, open_store
from worker.local_agent import ensure_local_agent
from worker.temporal import connect_from_settings
from workflows.job import JobWorkflow
from workflows.run import RunWorkflow

WORKFLOWS: Sequence[type] = (RunWorkflow, JobWorkflow)
# Per-call timeout for agent requests: short, so a lost host is noticed within the watch's threshold.
AGENT_REQUEST_TIMEOUT = 5.0


def activities_for(instances: InstanceDirectory, store: Store) -> list[Callable[..., Any]]:
    jobs = JobActivities(instances, store)
    records = RecordActivities(store)
    return [
        records.record_run,
        records.record_job,
        jobs.allocate,
        jobs.prepare_task,
        jobs.start_job,
        jobs.watch_job,
        jobs.stop_task,
        jobs.release_task,
    ]


def local_instances(settings: Settings) -> InstanceDirectory:
    agent = ensure_local_agent(settings.home)
    instances = InstanceDirectory()
    instances.add(LOCAL_INSTANCE, AgentClient(agent.url, agent.token, timeout=AGENT_REQUEST_TIMEOUT))
    return instances


def build_worker(
    client: Client, instances: InstanceDirectory, store: Store, *, task_queue: str = TASK_QUEUE
) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(WORKFLOWS),
        activities=activities_for(instances, store),
        max_concurrent_activities=1000,
        max_concurrent_workflow_tasks=100,
        graceful_shutdown_timeout=timedelta(seconds=5),
    )


async def run_worker(settings: Settings) -> None:
    client = await connect_from_settings(settings)
    store = open_store(settings.database_url)
    instances = local_instances(settings)
    worker = build_worker(client, instances, store)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with worker:
        await stop.wait()
    await instances.aclose()
