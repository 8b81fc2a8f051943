"""A release that changed a workflow without `workflow.patched` (docs/upgrades.md#changing-a-workflow): the
replay tests show it is caught, and tests/lifecycle/test_stuck_runs.py runs it on a real worker."""

from __future__ import annotations

from temporalio import workflow

from core.runs.workflow_messages import RunInput
from core.wire.run_messages import RunResult
from workflows.run import RunWorkflow


@workflow.defn(name="RunWorkflow", sandboxed=False)
class RunWorkflowThatForgetsTheStore(RunWorkflow):
    """A release that stopped flushing the run's events, without `workflow.patched`."""

    async def _flush(self, *, last: bool = False) -> None:
        return None

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        return await super().run(inp)
