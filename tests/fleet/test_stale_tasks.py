"""A host that lost power under other deployments' jobs works like a new one (docs/jobs.md#ended-tasks).

As a new user met it: jobs were running when the host lost power, three times, each under another
deployment (another FERRY_HOME: the same project and run name, so the same job workflow id, the tasks'
owner); their tasks stayed in the host's agent directory. The next deployment's job on that host was ended
at its start with the old tasks' "agent restarted and the job's process is gone". Now the old tasks are
ended and hold nothing, and the new job hears its own task's end only, through its instance's watch.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.instance_watch import InstanceWatchActivities
from activities.instances import InstanceDirectory
from activities.ssh import HostPool
from agent.task_watch import GONE_MESSAGE
from core.jobs.phases import JobControl
from core.status import JobTerminationReason
from core.wire.agent_api import JobSpec, TaskStatus, TaskSubmitRequest
from core.wire.messages import TASK_ENDED, JobOutcome, WatchInstance
from store import open_store
from testbed.helpers import deploy_options, eventually, target
from testbed.netns import HostNetwork

pytestmark = pytest.mark.asyncio(loop_scope="module")

HOST = 1
OWNER = "ferry/main/train/r0/j0/s0"  # run `train`'s first job, in every deployment


class Told:
    """The Temporal client the instance watch signals through: what each job was told, in order."""

    def __init__(self) -> None:
        self.outcomes: list[JobOutcome] = []

    def get_workflow_handle(self, workflow_id: str) -> Any:
        told = self

        class Handle:
            async def signal(self, name: str, outcome: JobOutcome) -> None:
                assert (name, workflow_id) == (TASK_ENDED, OWNER)
                told.outcomes.append(outcome)

        return Handle()


async def start(pool: HostPool, task_id: str, commands: list[str]) -> None:
    client = pool.client(f"fleet-{HOST}")
    await client.submit_task(TaskSubmitRequest(id=task_id, owner=OWNER))
    await client.submit_job(task_id, JobSpec(run_name="train", commands=commands))
    await client.run(task_id)


async def test_a_host_that_lost_power_under_other_deployments_jobs_runs_the_next_ones(
    network: HostNetwork, workdir: Path, bundle_cache: Path, tmp_path: Path
) -> None:
    options, host = deploy_options(workdir, bundle_cache), target(network, HOST)
    stale = [f"train-{n:08x}-r0-j0-s0" for n in range(3)]
    for task_id in stale:  # a deployment whose job runs when the power goes
        pool = HostPool(options)
        try:
            await pool.deploy(host)
            await start(pool, task_id, ["sleep 600"])
        finally:
            await pool.aclose()
        network.power_cycle(HOST)

    pool = HostPool(options)
    instances = InstanceDirectory()
    told, env = Told(), ActivityEnvironment()
    try:
        await pool.deploy(host)
        client = pool.client(host.name)
        instances.add(host.name, client)

        async def stale_ended() -> list[str | None] | None:
            tasks = {task.id: task for task in await client.list_tasks()}
            ended = [tasks[t].termination_message for t in stale if tasks[t].status == TaskStatus.TERMINATED]
            return ended if len(ended) == len(stale) else None

        assert await eventually(stale_ended, what="the stale tasks to end") == [GONE_MESSAGE] * len(stale)
        info = await client.instance_info()
        assert info.free == info.total  # they hold nothing

        store = open_store(f"sqlite:///{tmp_path / 'ferry.db'}")
        watch = WatchInstance(instance_name=host.name, owners="ferry/main/", unreachable_after=10)
        activities = InstanceWatchActivities(instances, store, told)  # type: ignore[arg-type]
        watching = asyncio.create_task(env.run(activities.watch_instance, watch))
        new = "train-0000000a-r0-j0-s0"
        await start(pool, new, ["echo the new job"])

        async def new_ended() -> bool:
            return any(outcome.task_id == new for outcome in told.outcomes)

        await eventually(new_ended, what="the new job to be told its end")
        env.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(watching, 10)

        assert {o.task_id for o in told.outcomes} == {*stale, new}  # the watch tells each task's end
        control = JobControl()
        for outcome in told.outcomes:  # in the order they came, as the new job's workflow hears them
            control = control.on_task_ended(outcome, new)
        assert control.ended is not None
        assert (control.ended.termination_reason, control.ended.exit_status) == (
            JobTerminationReason.DONE_BY_RUNNER,
            0,
        )
        assert store.read_log(new)[0] == b"the new job\n"
        assert await pool.healthy(host.name)
    finally:
        await pool.remove(host.name, stop_agent=True)
        await pool.aclose()
