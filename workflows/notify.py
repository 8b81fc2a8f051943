"""A run's notifications sent (docs/runs.md#notifications), never in the run's way.

The run's workflow decides them at each store write (`Notifier.send`, core.notifications) and hands them
to its one NotifyWorkflow: a child started with the first ones and ABANDONed, so that it outlives the run,
then told the rest by signal. The child posts them (activities/notifications.py), each webhook's in order,
webhooks independently; a delivery still failing after DELIVERY_DEADLINE is given up with a warning in the
worker's log. It ends once the run's end is delivered (or given up). A run without `notifications` starts
no child and sends nothing: its history is what it was before notifications.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from core.configuration.notifications import NotificationKind
    from core.eventlog import Event
    from core.notifications import (
        Delivery,
        NotifyBatch,
        NotifyResult,
        RunIdentity,
        deliveries,
        notifications_of,
        notify_workflow_id,
    )
    from core.runs.run_state import RunState
    from core.runs.status_words import status_message
    from core.runs.workflow_messages import RunInput
    from core.status import RunStatus
    from workflows import activity_stubs, retry_policies
    from workflows.handles import settle

DELIVERY_DEADLINE = timedelta(hours=1)  # schedule-to-close: the retries of one delivery, all together
ATTEMPT_TIMEOUT = timedelta(seconds=30)


@workflow.defn
class NotifyWorkflow:
    @workflow.init
    def __init__(self, batch: NotifyBatch) -> None:
        self._queues: dict[str, list[Delivery]] = {}  # per webhook URL, in order
        self._new: list[str] = []  # URLs without their lane yet
        self._last = False
        self._result = NotifyResult()
        self._take(batch)

    @workflow.signal
    def notify(self, batch: NotifyBatch) -> None:
        self._take(batch)

    def _take(self, batch: NotifyBatch) -> None:
        for delivery in batch.deliveries:
            if delivery.url not in self._queues:
                self._queues[delivery.url] = []
                self._new.append(delivery.url)
            self._queues[delivery.url].append(delivery)
        self._last = self._last or batch.last

    @workflow.run
    async def run(self, batch: NotifyBatch) -> NotifyResult:
        lanes: list[asyncio.Task[None]] = []
        while not (self._last and not any(self._queues.values())):
            lanes += [asyncio.create_task(self._lane(url)) for url in self._new]
            self._new = []
            await workflow.wait_condition(
                lambda: bool(self._new) or (self._last and not any(self._queues.values()))
            )
        await asyncio.gather(*lanes)
        return self._result

    async def _lane(self, url: str) -> None:
        queue = self._queues[url]
        while True:
            await workflow.wait_condition(lambda: bool(queue) or self._last)
            if not queue:
                return
            delivery = queue[0]
            try:
                await workflow.execute_activity(
                    activity_stubs.deliver_notification,
                    delivery,
                    schedule_to_close_timeout=DELIVERY_DEADLINE,
                    start_to_close_timeout=ATTEMPT_TIMEOUT,
                    retry_policy=retry_policies.NOTIFY,
                )
                self._result.delivered += 1
            except ActivityError as err:
                given_up = f"{delivery.notification.delivery_id()} {url}"
                workflow.logger.warning("notification %s given up: %s", given_up, err.cause or err)
                self._result.given_up.append(given_up)
            queue.pop(0)


class Notifier:
    """The run workflow's side: what its events notify, handed to its NotifyWorkflow."""

    def __init__(self, status: RunStatus | None) -> None:
        self._status = status  # the run's status as notified so far (None: before its `submit`)
        self._started = False  # in this execution: the child may run from an earlier one

    async def send(self, inp: RunInput, events: list[Event], start_seq: int, state: RunState) -> None:
        specs = inp.configuration.notifications
        if not specs or not events:
            return
        run = RunIdentity(run=inp.run_name, run_id=inp.run_id, project=inp.project)
        message = status_message(state) if state.status.is_finished() else None
        found, self._status = notifications_of(run, events, start_seq, self._status, message)
        batch = NotifyBatch(
            deliveries=deliveries(specs, found),
            last=any(n.event == NotificationKind.FINISHED for n in found),
        )
        if not batch.deliveries and not batch.last:
            return
        notifier_id = notify_workflow_id(workflow.info().workflow_id, inp.run_id)
        if not self._started:
            self._started = True
            try:
                child = await workflow.start_child_workflow(
                    NotifyWorkflow.run,
                    batch,
                    id=notifier_id,
                    parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                    static_summary=f"notifications of run {inp.run_name}",
                )
                settle(child)  # it outlives the run: no one awaits it
                return
            except WorkflowAlreadyStartedError:
                pass  # started by this run before it continued as new
        await workflow.get_external_workflow_handle(notifier_id).signal(NotifyWorkflow.notify, batch)
