"""Notifications decided (docs/runs.md#notifications): the bodies of a run's events, the webhooks'
filters, the signature, and `notifications:` validated as every other field."""

from __future__ import annotations

import hashlib
import hmac
import json
import textwrap

import pytest

from core.configuration.loading import ConfigurationError, load_configuration_text
from core.configuration.notifications import NotificationKind, NotificationSpec
from core.eventlog import Event
from core.notifications import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    Delivery,
    RunIdentity,
    deliveries,
    headers,
    notifications_of,
    notify_workflow_id,
    signature,
    signature_matches,
)
from core.secrets import configuration_secrets
from core.status import RunStatus

RUN = RunIdentity(run="train", run_id="r-1", project="main")


def event(name: str, at: float, **context: object) -> Event:
    return Event(timestamp=at, name=name, context=context)


# A run that is retried once, then stopped: submit, provisioning, running, a retry, terminating, the end.
LOG = [
    event("submit", 1.0, run_name="train", project="main", user="u", type="task"),
    event("job-submit", 1.0, replica=0, job=0, submission=0),
    event("status", 2.0, status="provisioning"),
    event("status", 3.0, status="running"),
    event("retry", 4.0, replicas=[0], attempt=1, backoff=0),
    event("status", 5.0, status="terminating", reason="stopped_by_user"),
    event("clean", 6.0, status="terminated", reason="stopped_by_user"),
]


def test_a_run_s_events_make_one_body_each_status_retry_and_end() -> None:
    found, status = notifications_of(RUN, LOG, 0, None, "stopped by user")
    assert status == RunStatus.TERMINATED
    assert [(n.seq, n.event, n.previous_status, n.status, n.reason) for n in found] == [
        (0, "status", None, "submitted", None),
        (2, "status", "submitted", "provisioning", None),
        (3, "status", "provisioning", "running", None),
        (4, "retry", None, "running", None),
        (5, "status", "running", "terminating", "stopped_by_user"),
        (6, "finished", "terminating", "terminated", "stopped_by_user"),
    ]
    assert found[-1].message == "stopped by user"
    assert found[3].message == "attempt 1: replicas 0 resubmitted"
    assert json.loads(found[0].body()) == {
        "run": "train",
        "run_id": "r-1",
        "project": "main",
        "event": "status",
        "status": "submitted",
        "previous_status": None,
        "reason": None,
        "message": None,
        "timestamp": 1.0,
        "seq": 0,
    }


def test_the_events_split_over_store_writes_notify_the_same() -> None:
    whole, _ = notifications_of(RUN, LOG, 0, None, "stopped by user")
    first, status = notifications_of(RUN, LOG[:3], 0, None)
    rest, _ = notifications_of(RUN, LOG[3:], 3, status, "stopped by user")
    assert first + rest == whole
    assert [n.delivery_id() for n in whole] == ["r-1-0", "r-1-2", "r-1-3", "r-1-4", "r-1-5", "r-1-6"]


def test_each_webhook_gets_the_kinds_it_asks_for_in_order() -> None:
    found, _ = notifications_of(RUN, LOG, 0, None)
    every = NotificationSpec(url="http://a/hook")
    ends = NotificationSpec(url="https://b/hook", events=["finished", "retry"], secret="${{ secrets.KEY }}")
    sent = deliveries([every, ends], found)
    assert [d.url for d in sent].count("http://a/hook") == 6
    assert [(d.notification.event, d.secret) for d in sent if d.url == "https://b/hook"] == [
        (NotificationKind.RETRY, "KEY"),
        (NotificationKind.FINISHED, "KEY"),
    ]
    assert [d.notification.seq for d in sent if d.url == "http://a/hook"] == [0, 2, 3, 4, 5, 6]


def test_the_signature_is_the_hmac_sha256_of_the_exact_body() -> None:
    [first, *_] = notifications_of(RUN, LOG, 0, None)[0]
    body = first.body()
    expected = hmac.new(b"k3y", body, hashlib.sha256).hexdigest()
    assert signature("k3y", body) == f"sha256={expected}"
    assert signature_matches("k3y", body, f"sha256={expected}")
    assert not signature_matches("other", body, f"sha256={expected}")
    assert not signature_matches("k3y", body + b" ", f"sha256={expected}")
    delivery = Delivery(url="http://a/", secret="KEY", notification=first)
    assert headers(delivery, "k3y")[SIGNATURE_HEADER] == f"sha256={expected}"
    assert headers(delivery, "k3y")[DELIVERY_HEADER] == "r-1-0"
    assert SIGNATURE_HEADER not in headers(delivery.model_copy(update={"secret": None}), None)


def test_a_notifier_is_one_per_run_not_per_name() -> None:
    assert notify_workflow_id("ferry/main/train", "r-1") != notify_workflow_id("ferry/main/train", "r-2")


def load(extra: str) -> object:
    text = "type: task\ncommands: [x]\n" + textwrap.dedent(extra).lstrip("\n")
    return load_configuration_text(text, "n.yml").configuration


def test_notifications_are_read_with_their_secret_among_the_run_s_secrets() -> None:
    configuration = load("""
        notifications:
          - url: https://example.com/hook
            events: [finished]
            secret: ${{ secrets.HOOK_KEY }}
          - url: http://127.0.0.1:9000/
        """)
    assert configuration.notifications[0].secret_name() == "HOOK_KEY"  # type: ignore[attr-defined]
    assert configuration.notifications[1].events is None  # type: ignore[attr-defined]
    assert configuration_secrets(configuration) == ["HOOK_KEY"]  # type: ignore[arg-type]
    assert configuration.unsupported_fields() == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("extra", "line", "says"),
    [
        (
            "notifications:\n  - url: ftp://x/\n",
            4,
            "notifications.0.url: 'ftp://x/' is not an http:// or https://",
        ),
        ("notifications:\n  - url: example.com\n", 4, "notifications.0.url: 'example.com' is not an http"),
        ("notifications:\n  - url: http://x/\n    events: [stauts]\n", 5, "notifications.0.events.0: "),
        ("notifications:\n  - url: http://x/\n    secret: abc\n", 5, "notifications.0.secret: must be one"),
        ("notifications:\n  - url: http://x/\n    secret: ${{ env.A }}\n", 5, "notifications.0.secret: "),
        ("notifications:\n  - url: http://x/\n    retries: 3\n", 5, "notifications.0.retries: "),
    ],
)
def test_a_bad_notification_is_one_line_at_its_field(extra: str, line: int, says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load(extra)
    [issue] = caught.value.issues
    assert "\n" not in str(issue)
    assert str(issue).startswith(f"n.yml:{line}: {says}"), str(issue)
