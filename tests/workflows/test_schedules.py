"""A scheduled run with the workflows and activity doubles (docs/schedules.md): it creates its schedule
and waits PENDING; each cycle workflow (as the schedule would start it) runs one cycle of its jobs and is
told when it is over; a trigger during a cycle is skipped at once; a stop ends the run and deletes the
schedule. The Temporal Schedule itself is tried against the dev server (tests/lifecycle)."""

from __future__ import annotations

from typing import Any

from temporalio.client import WorkflowHandle

from core.status import RunStatus
from core.wire import activity_names as names
from core.wire.run_messages import CycleInput, DeployRequest
from tests.workflows.doubles import BLOCK, exited
from tests.workflows.harness import Harness, configuration, named
from workflows.cycle import CycleWorkflow
from workflows.run import RunWorkflow

HOURLY = {"schedule": {"cron": "0 * * * *"}}


async def start_cycle(harness: Harness, run: WorkflowHandle[Any, Any], n: int) -> WorkflowHandle[Any, str]:
    return await harness.client.start_workflow(
        CycleWorkflow.run,
        CycleInput(run_workflow_id=run.id),
        id=f"{run.id}/cycle-{n}",
        task_queue=harness.queue,
    )


async def test_cycles_of_a_scheduled_run(harness: Harness) -> None:
    backend = harness.backend
    backend.watch_script = {(0, 0, 1): BLOCK}
    handle = await harness.start(configuration("task", **HOURLY))
    state = await harness.wait_for(
        handle, "pending", lambda s: s.status == RunStatus.PENDING and s.next_at is not None
    )
    await harness.wait_until("its schedule", lambda: bool(backend.schedules))
    [created] = backend.schedules.values()
    assert created.crons == ["0 * * * *"] and created.run_workflow_id == handle.id
    assert backend.called("prepare_task") == []  # nothing runs before the schedule fires

    first = await start_cycle(harness, handle, 1)
    assert await first.result() == "done"  # the cycle workflow stays open until its cycle is over
    state = await harness.wait_for(handle, "pending again", lambda s: s.status == RunStatus.PENDING)
    assert state.cycle == 1 and state.last_cycle == "done" and state.next_at is not None

    second = await start_cycle(harness, handle, 2)
    await harness.wait_for(
        handle, "cycle 2 running", lambda s: s.cycle == 2 and s.status == RunStatus.RUNNING
    )
    third = await start_cycle(harness, handle, 3)
    assert await third.result() == "skipped: cycle 2 is running"

    await harness.stop(handle)
    assert (await harness.result(handle)).status == RunStatus.TERMINATED
    assert await second.result() == "terminated"
    assert backend.schedules == {} and backend.deleted_schedules == [created.schedule_id]
    events = harness.run_events()
    assert [e.context["cycle"] for e in named(events, "cycle")] == [1, 2]
    assert len(named(events, "cycle-skip")) == 1 and len(named(events, "cycle-end")) == 1
    await harness.check_eventlogs_replay(handle)


async def test_a_re_applied_scheduled_run_takes_its_new_configuration_between_cycles(
    harness: Harness,
) -> None:
    """docs/schedules.md#changing-a-scheduled-run: between cycles the schedule's cron changes in place; during
    a cycle the change waits for its end, and the cycle goes on with the commands it started with."""
    backend = harness.backend
    backend.watch_script = {(0, 0, 0): BLOCK, (0, 0, 1): BLOCK}
    handle = await harness.start(configuration("task", **HOURLY))
    before = await harness.wait_for(handle, "pending", lambda s: s.next_at is not None)
    await harness.wait_until("its schedule", lambda: bool(backend.schedules))
    [schedule_id] = backend.schedules

    new_cron = configuration("task", schedule={"cron": "30 4 * * *"})
    reply = await handle.execute_update(RunWorkflow.deploy, DeployRequest(configuration=new_cron))
    assert (reply.deployment, reply.changed, reply.refused, reply.after_cycle) == (
        1,
        ["schedule"],
        None,
        None,
    )
    await harness.wait_until("the schedule updated", lambda: bool(backend.schedule_updates))
    assert backend.schedules[schedule_id].crons == ["30 4 * * *"]
    after = await harness.wait_for(handle, "the new next trigger", lambda s: s.next_at != before.next_at)
    assert after.status == RunStatus.PENDING and after.deployment == 1

    first = await start_cycle(harness, handle, 1)
    await harness.wait_for(handle, "cycle 1 running", lambda s: s.status == RunStatus.RUNNING)
    v2 = configuration("task", schedule={"cron": "30 4 * * *"}, commands=["train v2"])
    reply = await handle.execute_update(RunWorkflow.deploy, DeployRequest(configuration=v2))
    assert (reply.changed, reply.after_cycle) == (["commands"], 1)
    unplaced = configuration("task", commands=["train v2"])
    refused = await handle.execute_update(RunWorkflow.deploy, DeployRequest(configuration=unplaced))
    assert refused.refused is not None and "schedule" in refused.refused

    backend.finish_watch((0, 0, 0), exited(0))
    assert await first.result() == "done"
    await harness.wait_for(handle, "the change taken", lambda s: s.deployment == 2)
    second = await start_cycle(harness, handle, 2)
    await harness.wait_for(
        handle, "cycle 2 running", lambda s: s.cycle == 2 and s.status == RunStatus.RUNNING
    )
    [cycle_1] = backend.called(names.START_JOB, (0, 0, 0))
    [cycle_2] = backend.called(names.START_JOB, (0, 0, 1))
    assert "train v2" not in cycle_1.spec.commands[-1] and "train v2" in cycle_2.spec.commands[-1]
    assert len(backend.schedule_updates) == 1  # the commands changed, not the cron

    await harness.stop(handle)
    assert await second.result() == "terminated"
    await harness.result(handle)  # the run's last write is its last act (docs/runs.md#the-store)
    deploys = named(harness.run_events(), "deploy")
    assert [e.context["changed"] for e in deploys] == [["schedule"], ["commands"]]
    await harness.check_eventlogs_replay(handle)
