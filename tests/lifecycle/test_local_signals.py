"""Signals sent for a workflow by a local activity (activities/signals.py) on a real dev server: once
only by request id, in order per workflow, decoded by the handler's type, and undelivered where the
workflow is not running."""

from __future__ import annotations

import uuid

from temporalio import workflow
from temporalio.worker import Worker

from activities.signals import SignalActivities
from core.wire.job_messages import Queued
from core.wire.messages import SendSignals, Signal
from worker.temporal import connect


@workflow.defn(sandboxed=False)
class Listener:
    def __init__(self) -> None:
        self.heard: list[int] = []
        self.done = False

    @workflow.signal
    def queued(self, queued: Queued) -> None:
        self.heard.append(queued.position)

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.run
    async def run(self) -> list[int]:
        await workflow.wait_condition(lambda: self.done)
        return self.heard


def queued(workflow_id: str, position: int, request_id: str) -> Signal:
    arg = Queued(position=position).model_dump(mode="json")
    return Signal(workflow_id=workflow_id, signal="queued", arg=arg, request_id=request_id)


async def test_signals_arrive_once_in_order_or_are_undelivered(
    temporal_address: str,
) -> None:
    client = await connect(temporal_address)
    queue = f"signals-{uuid.uuid4().hex[:8]}"
    sender = SignalActivities(client)
    async with Worker(client, task_queue=queue, workflows=[Listener]):
        handle = await client.start_workflow(Listener.run, id=f"{queue}/listener", task_queue=queue)
        first = SendSignals(signals=[queued(handle.id, n, f"r{n}") for n in range(5)])
        assert await sender.send_signals(first) == [True] * 5
        # Sent again (a retried local activity, a redone workflow task), with one more: only that one is new.
        again = SendSignals(signals=[*first.signals, queued(handle.id, 5, "r5")])
        assert await sender.send_signals(again) == [True] * 6
        missing = SendSignals(signals=[queued(f"{queue}/no-such-workflow", 0, "x")])
        assert await sender.send_signals(missing) == [False]
        finish = Signal(workflow_id=handle.id, signal="finish", request_id="finish")
        assert await sender.send_signals(SendSignals(signals=[finish])) == [True]
        assert await handle.result() == [0, 1, 2, 3, 4, 5]
        # Ended: a signal to it is undelivered, as the fleet expects of a job that has ended.
        assert await sender.send_signals(SendSignals(signals=[queued(handle.id, 6, "r6")])) == [False]
