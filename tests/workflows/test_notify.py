"""A run's NotifyWorkflow (workflows/notify.py, docs/runs.md#notifications) on the time-skipping test
server, its deliveries posted by a double: a receiver that is down holds back only its own notifications,
for about DELIVERY_DEADLINE in all, not that long each; the notifier continues as new past its history
limit with its queues, its failing webhooks and their deadlines, and the run's signals reach the new
execution; histories from before the bound replay."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from core.configuration.notifications import NotificationKind
from core.notifications import DELIVERY_DEADLINE, Delivery, Notification, NotifyBatch, NotifyResult
from core.status import RunStatus
from core.wire import activity_names as names
from tests.workflows.harness import WAIT_LIMIT, Harness, check_patch_guards, without_patch
from tests.workflows.test_run_continue_as_new import execution_histories
from workflows import notify

UP, DOWN = "http://up.test/hook", "http://down.test/hook"
SLACK = timedelta(minutes=10)  # the last retry's backoff (at most 5 min) and the test server's steps


@dataclass
class Receivers:
    """Every attempt at a delivery: (url, seq, attempt, when it was scheduled); `down` URLs fail."""

    down: set[str] = field(default_factory=lambda: {DOWN})
    calls: list[tuple[str, int, int, datetime]] = field(default_factory=list)

    @activity.defn(name=names.DELIVER_NOTIFICATION)
    async def deliver(self, delivery: Delivery) -> int:
        info = activity.info()
        when = info.current_attempt_scheduled_time
        self.calls.append((delivery.url, delivery.notification.seq, info.attempt, when))
        if delivery.url in self.down:
            raise ApplicationError(f"{delivery.url} answered 503")
        return 204

    def seqs(self, url: str) -> list[int]:
        return [seq for u, seq, _, _ in self.calls if u == url]


@dataclass
class Notifier:
    harness: Harness
    receivers: Receivers
    queue: str
    id: str = field(default_factory=lambda: f"ferry/test/train/notify/{uuid.uuid4().hex[:8]}")

    handle: WorkflowHandle[Any, NotifyResult] | None = None

    async def start(self, batch: NotifyBatch) -> WorkflowHandle[Any, NotifyResult]:
        self.handle = await self.harness.client.start_workflow(
            notify.NotifyWorkflow.run, batch, id=self.id, task_queue=self.queue
        )
        return self.handle

    async def signal(self, batch: NotifyBatch) -> None:
        await self.harness.client.get_workflow_handle(self.id).signal(notify.NotifyWorkflow.notify, batch)

    async def result(self) -> NotifyResult:
        """The last execution's result (the handle follows continue-as-new), skipping time meanwhile."""
        assert self.handle is not None
        return await asyncio.wait_for(self.handle.result(), WAIT_LIMIT)


@pytest.fixture
async def notifier(harness: Harness) -> AsyncIterator[Notifier]:
    receivers = Receivers()
    queue = f"notify-{uuid.uuid4().hex[:8]}"
    async with Worker(
        harness.client, task_queue=queue, workflows=[notify.NotifyWorkflow], activities=[receivers.deliver]
    ):
        yield Notifier(harness, receivers, queue)


def deliveries(url: str, *seqs: int) -> list[Delivery]:
    return [
        Delivery(
            url=url,
            notification=Notification(
                run="train",
                run_id="train-0001",
                project="test",
                event=NotificationKind.STATUS,
                status=RunStatus.RUNNING,
                previous_status=None,
                timestamp=float(seq),
                seq=seq,
            ),
        )  # fmt: skip
        for seq in seqs
    ]


async def test_a_down_receiver_holds_back_only_its_own_for_one_deadline_in_all(notifier: Notifier) -> None:
    start = await notifier.harness.env.get_current_time()
    batch = NotifyBatch(deliveries=deliveries(DOWN, 0, 2, 3) + deliveries(UP, 0, 2, 3), last=True)
    handle = await notifier.start(batch)
    result = await notifier.result()
    assert (result.delivered, result.given_up_total) == (3, 3)
    assert result.given_up == [f"train-0001-{seq} {DOWN}" for seq in (0, 2, 3)]
    calls = notifier.receivers.calls
    # The receiver that answers gets its three at once, in order: none waits behind the one that is down.
    assert notifier.receivers.seqs(UP) == [0, 2, 3]
    assert all(when - start < timedelta(minutes=1) for url, *_, when in calls if url == UP)
    # The first is retried for its hour; the next gets one attempt, and with it fails the one behind it.
    assert set(notifier.receivers.seqs(DOWN)) == {0, 2} and notifier.receivers.seqs(DOWN).count(2) == 1
    assert max(when for url, seq, _, when in calls if seq == 0 and url == DOWN) - start <= DELIVERY_DEADLINE
    described = await handle.describe()
    assert described.close_time is not None and described.close_time - start < DELIVERY_DEADLINE + SLACK


async def test_a_notifier_continues_as_new_with_its_queues_and_the_signals_follow(
    notifier: Notifier,
) -> None:
    start = await notifier.harness.env.get_current_time()
    batch = NotifyBatch(deliveries=deliveries(UP, 0) + deliveries(DOWN, 0), history_limit=30)
    handle = await notifier.start(batch)
    for seq in range(1, 16):
        await notifier.signal(
            NotifyBatch(deliveries=deliveries(UP, seq) + deliveries(DOWN, seq), last=seq == 15)
        )
        await asyncio.sleep(0.05)
    result = await notifier.result()
    histories = await execution_histories(handle)
    assert len(histories) >= 3
    assert max(len(history.events) for history in histories) < 80  # bounded by the limit, not the run
    # Every notification reached the live receiver, in order; an attempt cut short is made again.
    seen = notifier.receivers.seqs(UP)
    assert list(dict.fromkeys(seen)) == list(range(16))
    # The result is carried from execution to execution.
    assert (result.delivered, result.given_up_total) == (16, 16)
    # The down receiver's first delivery kept its deadline across the executions: given up about an
    # hour after its first attempt, not an hour after the last continue-as-new.
    down = [(seq, when) for url, seq, _, when in notifier.receivers.calls if url == DOWN]
    assert {seq for seq, _ in down} == {0, 1}
    assert max(when for seq, when in down if seq == 0) - start <= DELIVERY_DEADLINE
    described = await handle.describe()
    assert described.close_time is not None and described.close_time - start < DELIVERY_DEADLINE + SLACK


async def test_notifier_histories_from_before_the_bound_replay(notifier: Notifier) -> None:
    with without_patch(notify._BOUNDED):
        handle = await notifier.start(NotifyBatch(deliveries=deliveries(DOWN, 0, 2, 3), last=True))
        result = await notifier.result()
    assert (result.delivered, result.given_up) == (0, [f"train-0001-{seq} {DOWN}" for seq in (0, 2, 3)])
    assert notifier.receivers.seqs(DOWN).count(3) > 1  # as before: each retried for its own hour
    history = await handle.fetch_history()
    await check_patch_guards(history, notify._BOUNDED, workflows=[notify.NotifyWorkflow])
