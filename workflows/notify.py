"""A run's notifications sent (docs/runs.md#notifications), never in the run's way.

The run's workflow decides them at each store write (`Notifier.send`, core.notifications) and hands them
to its one NotifyWorkflow: a child started with the first ones and ABANDONed, so that it outlives the run,
then told the rest by signal. The child posts them (activities/notifications.py), each webhook's in order,
webhooks independently (core.notifications.WebhookLanes): a delivery still failing after
DELIVERY_DEADLINE is given up with a warning in the worker's log, and its webhook is then tried once per
delivery until one gets through. Past HISTORY_LIMIT events it continues as new with its queues. It ends
once the run's end is delivered (or given up). A run without `notifications` starts no child and sends
nothing: its history is what it was before notifications.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError, RetryState, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from core.configuration.notifications import NotificationKind
    from core.eventlog import Event
    from core.notifications import (
        DELIVERY_DEADLINE,
        Delivery,
        NotifyBatch,
        NotifyResult,
        RunIdentity,
        WebhookLanes,
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

ATTEMPT_TIMEOUT = timedelta(seconds=30)
ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)  # a failing webhook's
# docs/upgrades.md: a failing webhook's queue given up at once, and continue-as-new past HISTORY_LIMIT.
_BOUNDED = "notify-bounded"


@workflow.defn
class NotifyWorkflow:
    @workflow.init
    def __init__(self, batch: NotifyBatch) -> None:
        self._lanes = WebhookLanes(batch)
        self._continuing = False  # lanes stop after their delivery in flight, which is cut short

    @workflow.signal
    def notify(self, batch: NotifyBatch) -> None:
        self._lanes.take(batch)

    @workflow.run
    async def run(self, batch: NotifyBatch) -> NotifyResult:
        lanes, tasks = self._lanes, list[asyncio.Task[None]]()
        bounded = workflow.patched(_BOUNDED)
        while not lanes.done():
            tasks += [asyncio.create_task(self._lane(url, bounded)) for url in lanes.new]
            lanes.new = []
            await workflow.wait_condition(
                lambda: bool(lanes.new) or lanes.done() or (bounded and self._continue_due())
            )
            if bounded and self._continue_due():
                self._continuing = True
                await asyncio.gather(*tasks)
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not lanes.done():
                    workflow.continue_as_new(lanes.carried())
        await asyncio.gather(*tasks)
        return lanes.result

    def _continue_due(self) -> bool:
        info = workflow.info()
        return self._lanes.continue_due(
            info.get_current_history_length(), info.is_continue_as_new_suggested()
        )

    async def _lane(self, url: str, bounded: bool) -> None:
        lanes = self._lanes
        while True:
            await workflow.wait_condition(
                lambda: lanes.head(url) is not None or lanes.last or self._continuing
            )
            delivery = lanes.head(url)
            if delivery is None or self._continuing:
                return
            if bounded:
                await self._deliver(url, delivery)
                continue
            try:  # as before _BOUNDED: every delivery retried for DELIVERY_DEADLINE
                await workflow.execute_activity(
                    activity_stubs.deliver_notification,
                    delivery,
                    schedule_to_close_timeout=DELIVERY_DEADLINE,
                    start_to_close_timeout=ATTEMPT_TIMEOUT,
                    retry_policy=retry_policies.NOTIFY,
                )
                lanes.delivered(url)
            except ActivityError as err:
                self._given_up(url, err, coalesce=False)

    async def _deliver(self, url: str, delivery: Delivery) -> None:
        """Post `url`'s head: retried until its deadline, or once while the webhook is failing; cut short
        (and kept, with its deadline) when this execution continues as new."""
        deadline = self._lanes.deadline(url, workflow.now().timestamp())
        handle = workflow.start_activity(
            activity_stubs.deliver_notification,
            delivery,
            schedule_to_close_timeout=deadline or ATTEMPT_TIMEOUT,
            start_to_close_timeout=ATTEMPT_TIMEOUT,
            retry_policy=retry_policies.NOTIFY if deadline else ONE_ATTEMPT,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        await workflow.wait_condition(lambda: handle.done() or self._continuing)
        if not handle.done():
            handle.cancel()  # a retry not yet made is dropped; an attempt running ends as it will
        try:
            await handle
            self._lanes.delivered(url)
        except ActivityError as err:
            cut = isinstance(err.cause, CancelledError) or err.retry_state == RetryState.CANCEL_REQUESTED
            if not (self._continuing and cut):
                self._given_up(url, err)

    def _given_up(self, url: str, err: ActivityError, coalesce: bool = True) -> None:
        why = err.cause or err
        for delivery in self._lanes.given_up(url, coalesce):
            given_up = f"{delivery.notification.delivery_id()} {url}"
            workflow.logger.warning("notification %s given up: %s", given_up, why)


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
