"""A finished run forgotten (docs/cli.md#delete): its workflows in Temporal, then its records, events and
logs in the store (store/run_deletion.py). An active run is refused. What `DELETE /api/projects/{p}/runs/
{name}` does, and an operator's CLI itself (cli/direct_runs.py).

Temporal first: a delete that stops half-way leaves the run listed, and running it again finishes the job
(an execution already gone is skipped). A run name can be reused, so the run workflow's executions are
told apart by the run id in their input, never by the name alone.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from temporalio.client import Client

from cli.errors import RunActive
from core.notifications import notify_workflow_id
from core.status import RunStatus
from store import RunRecord, Store

# A run's status is final in the store a moment before its workflow's last command completes it.
CLOSE_WAIT_S = 10.0


async def delete_run(client: Client, store: Store, run: RunRecord) -> tuple[int, int]:
    """The run and its pipeline's tasks deleted; (job submissions, workflow executions) deleted."""
    if RunStatus(run.status).is_active():
        raise RunActive(f"run {run.run_name} is {run.status}: stop it first (ferry stop {run.run_name})")
    runs = [run, *await asyncio.to_thread(store.list_pipeline_tasks, run.id)]
    count = await delete_workflows(client, runs)
    deleted = await asyncio.to_thread(store.delete_run, run.id)
    return (len(deleted.job_submission_ids) if deleted else 0), count


async def delete_workflows(client: Client, runs: list[RunRecord]) -> int:
    """Every Temporal execution of the runs: theirs, their jobs', notifiers', cycles' and metrics'."""
    executions: list[tuple[str, str]] = []
    for run in runs:
        executions += await _executions_of(client, run)
        notifier = notify_workflow_id(run.workflow_id, run.id)  # its webhooks' (docs/runs.md#notifications)
        executions += await _listed(client, f"WorkflowId = '{notifier}'")
        if run.finished_at is not None:
            # A scheduled run's cycles and `ferry metrics`' samples: started while it was active, and
            # named after its workflow, as any run of its name's are.
            window = f"StartTime >= '{_iso(run.submitted_at)}' AND StartTime <= '{_iso(run.finished_at)}'"
            workflow = run.workflow_id
            helpers = f"WorkflowId = '{workflow}/cycle' OR WorkflowId STARTS_WITH '{workflow}/metrics/'"
            executions += await _listed(client, f"({helpers}) AND {window}")
    for workflow_id, run_id in executions:
        await _wait_closed(client, workflow_id, run_id)
    for workflow_id, run_id in executions:
        await _delete_execution(client, workflow_id, run_id)
    return len(executions)


async def _executions_of(client: Client, run: RunRecord) -> list[tuple[str, str]]:
    """The executions of the run's workflow (several, if it continued as new) and of its jobs' workflows
    (core/wire/workflow_ids.py) whose input names this run: the names are the same for every run of its
    name."""
    query = f"WorkflowId = '{run.workflow_id}' OR WorkflowId STARTS_WITH '{run.workflow_id}/r'"
    found = []
    for workflow_id, run_id in await _listed(client, query):
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        async for event in handle.fetch_history_events():
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            values: list[Any] = await client.data_converter.decode(payloads) if payloads else []
            if values and isinstance(values[0], dict) and values[0].get("run_id") == run.id:
                found.append((workflow_id, run_id))
            break  # the first event alone says whose it is
    return found


async def _listed(client: Client, query: str) -> list[tuple[str, str]]:
    return [(execution.id, execution.run_id) async for execution in client.list_workflows(query)]


async def _wait_closed(client: Client, workflow_id: str, run_id: str) -> None:
    from temporalio.client import WorkflowExecutionStatus

    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    deadline = asyncio.get_running_loop().time() + CLOSE_WAIT_S
    while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
        if asyncio.get_running_loop().time() > deadline:
            raise RunActive(f"workflow {workflow_id} is still running: try again in a moment")
        await asyncio.sleep(0.2)


async def _delete_execution(client: Client, workflow_id: str, run_id: str) -> None:
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
    from temporalio.service import RPCError, RPCStatusCode

    request = DeleteWorkflowExecutionRequest(
        namespace=client.namespace,
        workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
    )
    try:
        await client.workflow_service.delete_workflow_execution(request)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:  # gone already: a delete run again
            raise


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).astimezone().isoformat()
