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

from pydantic import BaseModel, ConfigDict

from core.configuration.notifications import NotificationKind, NotificationSpec
from core.eventlog import Event
from core.status import RunStatus

# The HTTP headers of a delivery.
EVENT_HEADER = "X-Ferry-Event"
DELIVERY_HEADER = "X-Ferry-Delivery"
SIGNATURE_HEADER = "X-Ferry-Signature"
SIGNATURE_PREFIX = "sha256="


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


class NotifyBatch(BaseModel):
    """Deliveries handed to a run's NotifyWorkflow (workflows/notify.py)."""

    deliveries: list[Delivery]
    last: bool = False  # the run has finished: nothing follows


class NotifyResult(BaseModel):
    delivered: int = 0
    given_up: list[str] = []  # "<delivery id> <url>" of each delivery given up


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
