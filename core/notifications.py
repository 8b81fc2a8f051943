"""Notifications (docs/runs.md#notifications): which of a run's events call its webhooks, with which JSON
body, and how a body is signed. Pure: workflows/notify.py sends them, activities/notifications.py posts them.

A notification is decided from the events a run stores (its eventlog, docs/runs.md#the-runs-eventlog): a
status change (`submit`, `status`, `cycle`: kind `status`), a retry (`retry`: kind `retry`) and the end
(`clean`: kind `finished`, with the run's termination reason and status message). Its `seq` is the
event's place in the run's eventlog, so `<run_id>-<seq>` names a delivery however often it is retried.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from datetime import timedelta

from pydantic import BaseModel, ConfigDict

from core.configuration.notifications import NotificationKind, NotificationSpec
from core.eventlog import Event
from core.status import RunStatus

# The HTTP headers of a delivery.
EVENT_HEADER = "X-Ferry-Event"
DELIVERY_HEADER = "X-Ferry-Delivery"
SIGNATURE_HEADER = "X-Ferry-Signature"
SIGNATURE_PREFIX = "sha256="

# A delivery is retried for up to DELIVERY_DEADLINE from its first attempt; once given up, its webhook is
# failing: each later delivery gets one attempt, and one that fails gives up those queued behind it too.
DELIVERY_DEADLINE = timedelta(hours=1)
LAST_TRY = timedelta(seconds=10)  # what a delivery carried past its deadline still gets
# A NotifyWorkflow continues as new past this many history events (or when Temporal suggests it).
HISTORY_LIMIT = 2000
SUGGESTED_FLOOR = 100
GIVEN_UP_KEPT = 100  # the given-up deliveries a result names (it counts them all)


class Notification(BaseModel):
    """The JSON body a webhook receives."""

    model_config = ConfigDict(frozen=True)

    run: str
    run_id: str
    project: str
    event: NotificationKind
    status: RunStatus  # the run's status after the event
    previous_status: RunStatus | None  # before it: None for the first (`submit`) and for a retry
    reason: str | None = None  # a termination reason (TERMINATING, the end)
    message: str | None = None  # the run's status message at the end; what a retry resubmits
    timestamp: float  # the event's, Unix seconds
    seq: int  # the event's place in the run's eventlog (0: `submit`)

    def delivery_id(self) -> str:
        return f"{self.run_id}-{self.seq}"

    def body(self) -> bytes:
        """The exact bytes posted and signed."""
        return json.dumps(self.model_dump(mode="json"), separators=(",", ":"), sort_keys=True).encode()


class Delivery(BaseModel):
    """One notification to one webhook; `secret` is the name of the secret that signs it (its value is
    opened by the activity that posts it: never in a workflow's history)."""

    model_config = ConfigDict(frozen=True)

    url: str
    secret: str | None = None
    notification: Notification


class NotifyResult(BaseModel):
    delivered: int = 0
    given_up: list[str] = []  # "<delivery id> <url>" of the last GIVEN_UP_KEPT deliveries given up
    given_up_total: int = 0


class NotifyCarry(BaseModel):
    """What a NotifyWorkflow that continues as new hands over besides its queues."""

    failing: list[str] = []  # webhooks given up on and not delivered to since: one attempt each
    since: dict[str, float] = {}  # per webhook, when its first queued delivery was first tried
    result: NotifyResult = NotifyResult()


class NotifyBatch(BaseModel):
    """Deliveries handed to a run's NotifyWorkflow (workflows/notify.py): by the run, or by the notifier
    itself when it continues as new (its queues in order, and `carry`)."""

    deliveries: list[Delivery]
    last: bool = False  # the run has finished: nothing follows
    carry: NotifyCarry | None = None
    history_limit: int | None = None  # continue as new past this many history events (None: HISTORY_LIMIT)


class RunIdentity(BaseModel):
    """What every notification of a run says about the run."""

    model_config = ConfigDict(frozen=True)

    run: str
    run_id: str
    project: str


def notifications_of(
    run: RunIdentity,
    events: Sequence[Event],
    start_seq: int,
    previous: RunStatus | None,
    final_message: str | None = None,
) -> tuple[list[Notification], RunStatus | None]:
    """The notifications of `events` (the run's events from `start_seq` on) and the run's status after
    them; `previous` is its status before them (None before its `submit`), `final_message` its status
    message once it has finished."""
    found: list[Notification] = []
    for offset, event in enumerate(events):
        status = _status_after(event)
        if status is not None:
            kind = NotificationKind.FINISHED if status.is_finished() else NotificationKind.STATUS
            reason = event.context.get("reason")
            message = final_message if kind == NotificationKind.FINISHED else None
            found.append(
                _notification(run, event, start_seq + offset, kind, status, previous, reason, message)
            )
            previous = status
        elif event.name == "retry" and previous is not None:
            replicas = ", ".join(str(replica) for replica in event.context.get("replicas", []))
            message = f"attempt {event.context.get('attempt')}: replicas {replicas or '-'} resubmitted"
            retry = NotificationKind.RETRY
            found.append(_notification(run, event, start_seq + offset, retry, previous, None, None, message))
    return found, previous


def _status_after(event: Event) -> RunStatus | None:
    """The status an event moves the run to (docs/runs.md#the-runs-eventlog); None: it stays."""
    if event.name in ("submit", "cycle"):
        return RunStatus.SUBMITTED
    if event.name in ("status", "clean"):
        return RunStatus(event.context["status"])
    return None


def _notification(
    run: RunIdentity,
    event: Event,
    seq: int,
    kind: NotificationKind,
    status: RunStatus,
    previous: RunStatus | None,
    reason: str | None,
    message: str | None,
) -> Notification:
    return Notification(
        **run.model_dump(),
        event=kind,
        status=status,
        previous_status=previous,
        reason=reason,
        message=message,
        timestamp=event.timestamp,
        seq=seq,
    )


def deliveries(specs: Sequence[NotificationSpec], notifications: Sequence[Notification]) -> list[Delivery]:
    """Each notification to each webhook that wants its kind, in order."""
    return [
        Delivery(url=spec.url, secret=spec.secret_name(), notification=notification)
        for notification in notifications
        for spec in specs
        if spec.wants(notification.event)
    ]


def signature(key: str, body: bytes) -> str:
    """The X-Ferry-Signature of `body`: `sha256=` and the hex HMAC-SHA256 of it keyed with the secret."""
    return SIGNATURE_PREFIX + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()


def signature_matches(key: str, body: bytes, header: str) -> bool:
    """What a receiver checks (in constant time)."""
    return hmac.compare_digest(signature(key, body), header)


def headers(delivery: Delivery, key: str | None) -> dict[str, str]:
    """The headers of `delivery`'s POST; signed when the webhook has a secret (`key`, its value)."""
    notification = delivery.notification
    found = {
        "Content-Type": "application/json",
        EVENT_HEADER: notification.event.value,
        DELIVERY_HEADER: notification.delivery_id(),
    }
    if key is not None:
        found[SIGNATURE_HEADER] = signature(key, notification.body())
    return found


def notify_workflow_id(run_workflow_id: str, run_id: str) -> str:
    """The one NotifyWorkflow of a run (a run's workflow id is reused by a later run of the same name)."""
    return f"{run_workflow_id}/notify/{run_id}"


class WebhookLanes:
    """A NotifyWorkflow's state (docs/runs.md#notifications): each webhook's queue, in the run's order, and
    whether it is failing. The workflow posts each queue's head and says how it went; a failing webhook
    costs one attempt per batch of its deliveries, never an hour each, and no other webhook waits for it."""

    def __init__(self, batch: NotifyBatch) -> None:
        carry = batch.carry or NotifyCarry()
        self.queues: dict[str, list[Delivery]] = {}
        self.last = False
        self.failing = set(carry.failing)
        self.since = dict(carry.since)
        self.result = carry.result.model_copy(deep=True)
        self.history_limit = batch.history_limit or HISTORY_LIMIT
        self.new: list[str] = []  # webhooks queued to for the first time here, in order: a lane each
        self.take(batch)

    def take(self, batch: NotifyBatch) -> None:
        for delivery in batch.deliveries:
            if delivery.url not in self.queues:
                self.queues[delivery.url] = []
                self.new.append(delivery.url)
            self.queues[delivery.url].append(delivery)
        self.last = self.last or batch.last

    def head(self, url: str) -> Delivery | None:
        queue = self.queues[url]
        return queue[0] if queue else None

    def done(self) -> bool:
        """The run has finished and every notification is delivered or given up."""
        return self.last and not any(self.queues.values())

    def deadline(self, url: str, now: float) -> timedelta | None:
        """How long the head of `url`'s queue may still be retried from `now`; None: one attempt only (the
        webhook is failing)."""
        if url in self.failing:
            return None
        since = self.since.setdefault(url, now)
        return max(DELIVERY_DEADLINE - timedelta(seconds=now - since), LAST_TRY)

    def delivered(self, url: str) -> None:
        self.queues[url].pop(0)
        self.since.pop(url, None)
        self.failing.discard(url)
        self.result.delivered += 1

    def given_up(self, url: str, coalesce: bool = True) -> list[Delivery]:
        """The deliveries given up once `url`'s head fails for good: the head, and when the webhook was
        already failing the rest of its queue too (`coalesce`; False: the head only, as before)."""
        queue = self.queues[url]
        count = len(queue) if coalesce and url in self.failing else 1
        found, queue[:count] = queue[:count], []
        self.since.pop(url, None)
        if coalesce:
            self.failing.add(url)
        self.result.given_up_total += len(found)
        self.result.given_up = [
            *self.result.given_up,
            *(f"{d.notification.delivery_id()} {url}" for d in found),
        ]
        self.result.given_up = self.result.given_up[-GIVEN_UP_KEPT:]
        return found

    def continue_due(self, history_length: int, suggested: bool) -> bool:
        """Whether to continue as new now. Temporal's suggestion counts only past SUGGESTED_FLOOR events, so
        that an execution whose carried input alone is large delivers some before it continues."""
        if self.done():
            return False
        return history_length >= self.history_limit or (suggested and history_length >= SUGGESTED_FLOOR)

    def carried(self) -> NotifyBatch:
        """The input of the NotifyWorkflow that continues this one: its queues in order, and its state."""
        return NotifyBatch(
            deliveries=[delivery for queue in self.queues.values() for delivery in queue],
            last=self.last,
            carry=NotifyCarry(failing=sorted(self.failing), since=self.since, result=self.result),
            history_limit=self.history_limit,
        )
