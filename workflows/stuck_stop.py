"""StuckStopWorkflow: `ferry stop` of a stuck run (docs/upgrades.md#stopping-a-stuck-run).

A stuck workflow takes no update, so the stop is carried out from outside, by this workflow beside the
run's: its workflows terminated, its tasks stopped and removed, its volumes and service replicas freed,
its capacity given back to its fleets, a scheduled run's schedule deleted, and its end stored as a stop
the run had carried out would have stored it (`core.runs.stuck_stop`). Every step is idempotent, so a
retry or a second stop finishes what the first began.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from core.fleets.messages import FLEET_RELEASE, ReleaseJob
    from core.wire.run_messages import StopReply
    from core.wire.stuck_stop import (
        EndRunWorkflows,
        RecordStuckStop,
        RemoveRunTasks,
        StuckStopInput,
    )
    from core.wire.workflow_ids import fleet_workflow_id, schedule_id
    from workflows import activity_stubs, retry_policies

_TEMPORAL_STEP = timedelta(minutes=1)
# Its tasks' stop_duration (5 minutes by default), then their removal.
_TASKS_STEP = timedelta(minutes=30)
_TASKS_HEARTBEAT = timedelta(seconds=30)


@workflow.defn
class StuckStopWorkflow:
    @workflow.run
    async def run(self, inp: StuckStopInput) -> StopReply:
        reason = f"{'aborted' if inp.abort else 'stopped'} while stuck: {inp.note}"
        ended = await workflow.execute_activity(
            activity_stubs.end_run_workflows,
            EndRunWorkflows(
                run_workflow_id=inp.run_workflow_id, keep=workflow.info().workflow_id, reason=reason
            ),
            start_to_close_timeout=_TEMPORAL_STEP,
            retry_policy=retry_policies.QUICK,
        )
        removal = RemoveRunTasks(
            run_id=inp.run_id,
            project=inp.project,
            fleets=ended.fleets,
            jobs=sorted(ended.jobs),
            abort=inp.abort,
        )
        removed = await workflow.execute_activity(
            activity_stubs.remove_run_tasks,
            removal,
            start_to_close_timeout=_TASKS_STEP,
            heartbeat_timeout=_TASKS_HEARTBEAT,
            retry_policy=retry_policies.QUICK,
        )
        own_fleets = [fleet_workflow_id(inp.project, fleet) for fleet in ended.fleets]
        for job in removed.jobs:  # its capacity, or its place in a queue, given back
            for fleet in [ended.jobs[job]] if job in ended.jobs else own_fleets:
                with contextlib.suppress(FailureError):  # a fleet deleted meanwhile needs nothing
                    await workflow.get_external_workflow_handle(fleet).signal(
                        FLEET_RELEASE, ReleaseJob(job_id=job)
                    )
        await workflow.execute_activity(
            activity_stubs.delete_schedule,
            schedule_id(inp.run_workflow_id, inp.run_id),
            start_to_close_timeout=_TEMPORAL_STEP,
            retry_policy=retry_policies.QUICK,
        )
        return await workflow.execute_activity(
            activity_stubs.record_stuck_stop,
            RecordStuckStop(run_id=inp.run_id, abort=inp.abort, note=inp.note, unremoved=removed.unremoved),
            start_to_close_timeout=_TEMPORAL_STEP,
            retry_policy=retry_policies.QUICK,
        )
