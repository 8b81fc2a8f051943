"""Runs whose workflow cannot go on (docs/upgrades.md#stuck-runs).

A workflow task that fails again and again (a bug in a workflow, a change that no longer replays its
history) leaves the workflow open and silent. Temporal flags such a workflow once two workflow tasks in a
row failed or timed out (the `TemporalReportedProblems` search attribute; the embedded stack and the
compose deployment turn it on), and clears the flag when one succeeds. `ferry ps` shows a run with such a
workflow, its own or one of its jobs', as `stuck`, with the workflow task's last error and since when;
`ferry server status` counts them. Finding them is one visibility query, whatever the number of runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.wire.workflow_ids import run_of_workflow

if TYPE_CHECKING:
    from temporalio.client import Client

    from core.temporal_connection import TemporalConnection
    from core.wire.run_messages import StopReply
    from store import RunRecord

STUCK_QUERY = "TemporalReportedProblems IS NOT NULL AND ExecutionStatus = 'Running'"
ASK_TIMEOUT = 5.0
_REASON_LIMIT = 200


@dataclass(frozen=True)
class StuckWorkflow:
    workflow_id: str
    since: float | None  # when its workflow task last failed (epoch seconds); None: not found in its history
    reason: str  # that failure's message, on one line

    def message(self) -> str:
        """`workflow ferry/main/train stuck since 2026-11-26 09:14:03: <its last error>`."""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since)) if self.since else None
        since = f" since {when}" if when else ""
        return f"workflow {self.workflow_id} stuck{since}: {self.reason}"


async def stuck_workflow_ids(client: Client) -> list[str]:
    """The open workflows Temporal flags for failing workflow tasks; none from a server that does not know
    the flag (before Temporal 1.29)."""
    from temporalio.service import RPCError, RPCStatusCode

    try:
        return [execution.id async for execution in client.list_workflows(STUCK_QUERY)]
    except RPCError as err:
        if err.status != RPCStatusCode.INVALID_ARGUMENT:
            raise
        return []


async def stuck_workflows(client: Client) -> list[StuckWorkflow]:
    """Every flagged workflow, with why and since when."""
    ids = await stuck_workflow_ids(client)
    return list(await asyncio.gather(*(_why(client, workflow_id) for workflow_id in ids)))


async def count_stuck_runs(connection: TemporalConnection) -> int:
    """How many runs have a flagged workflow (`ferry server status`)."""
    from worker.temporal import connect_to

    ids = await asyncio.wait_for(stuck_workflow_ids(await connect_to(connection)), ASK_TIMEOUT)
    return len({run for run in map(run_of_workflow, ids) if run is not None})


async def _why(client: Client, workflow_id: str) -> StuckWorkflow:
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.enums.v1 import EventType
    from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest

    # The first failure of a run of failing workflow tasks is in the history (later attempts are not): the
    # newest such event is the one, and it is near the end, so the history is read from there.
    page = b""
    while True:
        reply = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=workflow_id),
                maximum_page_size=50,
                next_page_token=page,
            )
        )
        for event in reply.history.events:
            since = event.event_time.ToSeconds()
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                failure = event.workflow_task_failed_event_attributes.failure
                return StuckWorkflow(workflow_id, since, await _failure_text(client, failure))
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                return StuckWorkflow(workflow_id, since, "its workflow task timed out")
        if not (page := reply.next_page_token):
            return StuckWorkflow(workflow_id, None, "its workflow tasks keep failing")


async def _failure_text(client: Client, failure: Any) -> str:
    # The message may be sealed by Ferry's codec (docs/secrets.md): decoded as any failure is.
    try:
        error = await client.data_converter.decode_failure(failure)
        text = str(error) or failure.message
    except Exception:  # noqa: BLE001 — an undecodable failure still says that the run is stuck
        text = failure.message
    text = " ".join(text.split())
    return text if len(text) <= _REASON_LIMIT else text[: _REASON_LIMIT - 3] + "..."


def stuck_runs(workflows: Sequence[StuckWorkflow]) -> dict[str, StuckWorkflow]:
    """By run workflow id: the stuck workflow of each run that has one (the run's own first)."""
    found: dict[str, StuckWorkflow] = {}
    for workflow in sorted(workflows, key=lambda w: len(w.workflow_id)):
        run = run_of_workflow(workflow.workflow_id)
        if run is not None:
            found.setdefault(run, workflow)
    return found


async def stop_stuck_run(
    client: Client, task_queue: str, project: str, record: RunRecord, stuck: StuckWorkflow, abort: bool
) -> StopReply:
    """`ferry stop` of a stuck run: carried out from outside by a StuckStopWorkflow beside the run's
    (docs/upgrades.md#stopping-a-stuck-run); a second stop meanwhile waits for the same one."""
    from temporalio.client import WorkflowFailureError
    from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
    from temporalio.exceptions import FailureError

    from cli.errors import FerryError
    from core.wire.stuck_stop import StuckStopInput
    from core.wire.workflow_ids import stuck_stop_workflow_id
    from workflows.stuck_stop import StuckStopWorkflow

    inp = StuckStopInput(
        run_id=record.id,
        run_workflow_id=record.workflow_id,
        project=project,
        abort=abort,
        note=stuck.message(),
    )
    try:
        return await client.execute_workflow(
            StuckStopWorkflow.run,
            inp,
            id=stuck_stop_workflow_id(record.workflow_id),
            task_queue=task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
    except WorkflowFailureError as err:
        cause = err.cause.message if isinstance(err.cause, FailureError) else str(err.cause)
        raise FerryError(
            f"run {record.run_name} is stuck and could not be stopped from outside: {cause}"
        ) from err
