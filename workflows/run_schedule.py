"""A scheduled run's Temporal Schedule, as RunWorkflow keeps it (docs/schedules.md): created when the run
starts, updated in place when it is re-applied with another cron, deleted when it ends; and each cycle
workflow told when its cycle is over (workflows/cycle.py)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from core.runs.effects import EndCycle, UpdateSchedule
    from core.runs.workflow_messages import RunInput
    from core.wire.messages import CreateSchedule, UpdateScheduleRequest
    from core.wire.run_messages import CycleDone
    from core.wire.workflow_ids import schedule_id
    from workflows import activity_stubs

_SCHEDULE_CALL = timedelta(seconds=30)


def _schedule_id(inp: RunInput) -> str:
    return schedule_id(workflow.info().workflow_id, inp.run_id)


async def create_schedule(inp: RunInput, crons: tuple[str, ...]) -> None:
    request = CreateSchedule(
        schedule_id=_schedule_id(inp),
        run_workflow_id=workflow.info().workflow_id,
        run_name=inp.run_name,
        project=inp.project,
        user=inp.user,
        run_type=inp.configuration.type,
        crons=list(crons),
    )
    await workflow.execute_activity(
        activity_stubs.create_schedule, request, start_to_close_timeout=_SCHEDULE_CALL
    )


async def update_schedule(inp: RunInput, effect: UpdateSchedule) -> None:
    request = UpdateScheduleRequest(schedule_id=_schedule_id(inp), crons=effect.crons)
    await workflow.execute_activity(
        activity_stubs.update_schedule, request, start_to_close_timeout=_SCHEDULE_CALL
    )


async def delete_schedule(inp: RunInput) -> None:
    await workflow.execute_activity(
        activity_stubs.delete_schedule, _schedule_id(inp), start_to_close_timeout=_SCHEDULE_CALL
    )


async def end_cycle(effect: EndCycle) -> None:
    handle = workflow.get_external_workflow_handle(effect.workflow_id)
    await handle.signal("done", CycleDone(outcome=effect.outcome))
