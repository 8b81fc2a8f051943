"""A workflow's signals to other workflows, sent by a local activity (activities/signals.py): one marker in
the sender's history, where a signal the workflow sends itself costs it two events and a workflow task to
hear of its delivery (docs/scaling.md#the-hot-path). Since the patch `LOCAL_HOT_PATH`.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from core.wire.messages import SendSignals, Signal
    from workflows import activity_stubs, patches, retry_policies

__all__ = ["LOCAL_HOT_PATH", "Signal", "send", "send_by_workflow", "send_one", "signal"]

# The patch of the job's and the fleet's workflows that made their hot path local: their signals sent by a
# local activity (histories begun before replay as they ran).
LOCAL_HOT_PATH = "local-hot-path"


def signal(workflow_id: str, name: str, arg: BaseModel | None, request_id: str) -> Signal:
    """`request_id`: unique among the signals this workflow sends, the same when its step is redone."""
    sender = workflow.info()
    return Signal(
        workflow_id=workflow_id,
        signal=name,
        arg=None if arg is None else arg.model_dump(mode="json"),
        request_id=f"{sender.workflow_id}/{sender.run_id}/{request_id}",
    )


async def send(*signals: Signal) -> list[bool]:
    """Send them, in order per workflow; whether each was delivered (False: its workflow is not running)."""
    if not signals:
        return []
    return await workflow.execute_local_activity(
        activity_stubs.send_signals,
        SendSignals(signals=list(signals)),
        start_to_close_timeout=timedelta(seconds=10),
        retry_policy=retry_policies.QUICK,
    )


async def send_one(
    workflow_id: str, name: str, arg: BaseModel | None, request_id: str, *, by_revision: bool
) -> bool:
    """One signal, by a local activity since LOCAL_HOT_PATH (always, `by_revision`: workflows/patches.py),
    else by the workflow itself as it was sent before; whether it was delivered (False: its workflow is
    not running)."""
    if patches.taken(LOCAL_HOT_PATH, by_revision):
        [delivered] = await send(signal(workflow_id, name, arg, request_id))
        return delivered
    return await send_by_workflow(workflow_id, name, arg)


async def send_by_workflow(workflow_id: str, name: str, arg: BaseModel | None) -> bool:
    """One signal sent by the workflow itself; whether it was delivered."""
    handle = workflow.get_external_workflow_handle(workflow_id)
    try:
        await (handle.signal(name) if arg is None else handle.signal(name, arg))
    except FailureError:
        return False
    return True
