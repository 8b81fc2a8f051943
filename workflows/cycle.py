"""CycleWorkflow: one trigger of a scheduled run's Temporal Schedule (docs/schedules.md).

It tells the run (`RunWorkflow.trigger`) and stays open until the run says the cycle is over (`done`):
the schedule's overlap policy (skip) sees a cycle workflow open for as long as the cycle runs. A run that
is gone (it ended meanwhile) has nothing to start.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from core.wire.run_messages import CycleDone, CycleInput, CycleTrigger


@workflow.defn
class CycleWorkflow:
    def __init__(self) -> None:
        self._outcome: str | None = None

    @workflow.signal
    def done(self, result: CycleDone) -> None:
        self._outcome = result.outcome

    @workflow.run
    async def run(self, inp: CycleInput) -> str:
        info = workflow.info()
        trigger = CycleTrigger(workflow_id=info.workflow_id, scheduled_at=workflow.now().timestamp())
        try:
            await workflow.get_external_workflow_handle(inp.run_workflow_id).signal("trigger", trigger)
        except FailureError as err:
            return f"not started: the run is gone ({err.message})"
        await workflow.wait_condition(lambda: self._outcome is not None)
        assert self._outcome is not None
        return self._outcome
