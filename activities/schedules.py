"""A scheduled run's Temporal Schedule (docs/schedules.md): created when the run starts, updated in place
when the run is re-applied with another cron, deleted when it ends.

Its action starts a CycleWorkflow (workflows/cycle.py) per trigger, with Ferry's search attributes,
so that each cycle is visible, and the schedule operable (pause, trigger, backfill), in the Web UI.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import activity
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from core.wire import activity_names as names
from core.wire.messages import CreateSchedule, UpdateScheduleRequest
from core.wire.run_messages import CycleInput
from workflows.search_attributes import SA_PROJECT, SA_RUN_NAME, SA_TYPE, SA_USER

# A trigger missed while Ferry (its Temporal server) was down still fires once it is back, if it is no
# older than this; older ones are skipped (docs/schedules.md#overlap-and-catch-up).
CATCHUP_WINDOW = timedelta(hours=1)
CYCLE_WORKFLOW = "CycleWorkflow"


class ScheduleActivities:
    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue

    @activity.defn(name=names.CREATE_SCHEDULE)
    async def create_schedule(self, request: CreateSchedule) -> None:
        """Idempotent: a retried creation finds the schedule there."""
        attributes = TypedSearchAttributes(
            [
                SearchAttributePair(SA_RUN_NAME, request.run_name),
                SearchAttributePair(SA_PROJECT, request.project),
                SearchAttributePair(SA_USER, request.user),
                SearchAttributePair(SA_TYPE, request.run_type),
            ]
        )
        schedule = Schedule(
            action=ScheduleActionStartWorkflow(
                CYCLE_WORKFLOW,
                CycleInput(run_workflow_id=request.run_workflow_id),
                # Temporal adds the trigger time to the id: one cycle workflow per trigger.
                id=f"{request.run_workflow_id}/cycle",
                task_queue=self.task_queue,
                typed_search_attributes=attributes,
                static_summary=f"a cycle of {request.run_type} {request.run_name}",  # docs/runs.md#the-web-ui
            ),
            spec=ScheduleSpec(cron_expressions=list(request.crons)),  # UTC: no time zone given
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP, catchup_window=CATCHUP_WINDOW),
            state=ScheduleState(note=f"ferry run {request.run_name} (project {request.project})"),
        )
        with contextlib.suppress(ScheduleAlreadyRunningError):
            await self.client.create_schedule(request.schedule_id, schedule)

    @activity.defn(name=names.UPDATE_SCHEDULE)
    async def update_schedule(self, request: UpdateScheduleRequest) -> None:
        """The new cron expressions; the rest (paused or not, its action, its policies) is kept.
        Idempotent: setting the same expressions again changes nothing."""
        crons = list(request.crons)

        def updated(current: ScheduleUpdateInput) -> ScheduleUpdate:
            schedule = current.description.schedule
            schedule.spec = ScheduleSpec(cron_expressions=crons)
            return ScheduleUpdate(schedule=schedule)

        await self.client.get_schedule_handle(request.schedule_id).update(updated)

    @activity.defn(name=names.DELETE_SCHEDULE)
    async def delete_schedule(self, schedule_id: str) -> None:
        """Idempotent: a schedule already gone is no error."""
        try:
            await self.client.get_schedule_handle(schedule_id).delete()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
