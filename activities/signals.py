"""A workflow's signals to other workflows, sent for it as a local activity (workflows/signals.py,
docs/scaling.md#the-hot-path).

Each goes with the request id the workflow chose: Temporal keeps the request ids a workflow was signalled
with and drops a repeat, so a signal sent again (the local activity retried, or its workflow task redone
after a worker died) arrives once.
"""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.api.common.v1 import Payloads, WorkflowExecution
from temporalio.api.workflowservice.v1 import SignalWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from core.wire import activity_names as names
from core.wire.messages import SendSignals, Signal


class SignalActivities:
    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name=names.SEND_SIGNALS)
    async def send_signals(self, request: SendSignals) -> list[bool]:
        """Each signal sent, in order per workflow; False for one whose workflow is not running."""
        by_workflow: dict[str, list[int]] = {}
        for index, signal in enumerate(request.signals):
            by_workflow.setdefault(signal.workflow_id, []).append(index)
        delivered = [False] * len(request.signals)

        async def in_order(indexes: list[int]) -> None:
            for index in indexes:
                delivered[index] = await self._send(request.signals[index])

        await asyncio.gather(*(in_order(indexes) for indexes in by_workflow.values()))
        return delivered

    async def _send(self, signal: Signal) -> bool:
        client = self._client
        args = [] if signal.arg is None else [signal.arg]
        try:
            await client.workflow_service.signal_workflow_execution(
                SignalWorkflowExecutionRequest(
                    namespace=client.namespace,
                    workflow_execution=WorkflowExecution(workflow_id=signal.workflow_id),
                    signal_name=signal.signal,
                    input=Payloads(payloads=await client.data_converter.encode(args)) if args else None,
                    identity=client.identity,
                    request_id=signal.request_id,
                ),
                retry=True,
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:  # it has ended (or never was)
                return False
            raise
        return True
