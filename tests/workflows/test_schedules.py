"""A scheduled run with the workflows and activity doubles (docs/schedules.md): it creates its schedule
and waits PENDING; each cycle workflow (as the schedule would start it) runs one cycle of its jobs and is
told when it is over; a trigger during a cycle is skipped at once; a stop ends the run and deletes the
schedule. The Temporal Schedule itself is tried against the dev server (tests/lifecycle)."""

from __future__ import annotations

from typing import Any

from temporalio.client import WorkflowHandle

from core.status import RunStatus
from core.wire.messages import CycleInput
from tests.workflows.doubles import BLOCK
from tests.workflows.harness import Harness, configuration, named
from workflows.cycle import CycleWorkflow

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
