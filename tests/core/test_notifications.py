"""Notifications decided (docs/runs.md#notifications): the bodies of a run's events, the webhooks'
filters, the signature, and `notifications:` validated as every other field."""

from __future__ import annotations

import hashlib
import hmac
import json
import textwrap

import pytest

from core.configuration.loading import ConfigurationError, load_configuration_text
from core.configuration.notifications import (
    NotificationKind,
    NotificationSpec,
    private_webhooks_allowed,
    refused_address,
    refused_webhook,
    resolved_refusal,
)
from core.eventlog import Event
from core.notifications import (
    DELIVERY_DEADLINE,
    DELIVERY_HEADER,
    GIVEN_UP_KEPT,
    LAST_TRY,
    SIGNATURE_HEADER,
    SUGGESTED_FLOOR,
    Delivery,
    NotifyBatch,
    RunIdentity,
    WebhookLanes,
    deliveries,
    headers,
    notifications_of,
    notify_workflow_id,
    signature,
    signature_matches,
)
from core.secrets import configuration_secrets
from core.settings import Settings
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


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"), ("10.1.2.3", "private"), ("172.16.0.1", "private"),
        ("192.168.1.1", "private"), ("fd00::1", "private"), ("169.254.169.254", "link-local"),
        ("fe80::1%eth0", "link-local"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),
        ("224.0.0.1", "multicast"), ("ff02::1", "multicast"), ("240.0.0.1", "private"),
        ("100.64.0.1", "non-public"), ("93.184.216.34", None), ("2606:4700::1111", None),
    ],
)  # fmt: skip
def test_every_address_that_is_not_public_is_named(address: str, kind: str | None) -> None:
    assert refused_address(address) == kind


def test_a_url_naming_a_non_public_ip_or_localhost_is_refused_before_submission() -> None:
    assert refused_webhook("http://127.0.0.1:9000/hook") == (
        "http://127.0.0.1:9000/hook: 127.0.0.1 is a loopback address: refused "
        "(FERRY_WEBHOOKS_ALLOW_PRIVATE=1 allows private webhooks, docs/deployment.md#webhooks)"
    )
    assert "localhost is a loopback address" in (refused_webhook("http://localhost:8000/") or "")
    assert "a.localhost is a loopback" in (refused_webhook("http://a.localhost/") or "")
    assert "::1 is a loopback" in (refused_webhook("https://[::1]:8443/") or "")
    assert "10.0.0.5 is a private" in (refused_webhook("http://10.0.0.5/") or "")
    # A name is resolved only when a notification is posted (and checked then).
    assert refused_webhook("https://hooks.example.com/ferry") is None
    assert refused_webhook("http://93.184.216.34/") is None


def test_every_address_a_name_resolves_to_is_checked() -> None:
    assert resolved_refusal("https://hooks.example.com/", ["93.184.216.34", "2606:4700::1111"]) is None
    said = resolved_refusal("https://hooks.example.com/x", ["93.184.216.34", "10.0.0.7"])
    assert said is not None and said.startswith(
        "https://hooks.example.com/x: hooks.example.com resolves to 10.0.0.7, a private address: refused"
    )


@pytest.mark.parametrize(
    ("value", "setting", "embedded", "deployment"),
    [(None, None, True, False), ("1", True, True, True), ("yes", True, True, True),
     ("0", False, False, False), ("no", False, False, False), ("maybe", False, False, False)],
)  # fmt: skip
def test_private_webhooks_are_the_embedded_stack_s_unless_set(
    value: str | None, setting: bool | None, embedded: bool, deployment: bool
) -> None:
    env = {} if value is None else {"FERRY_WEBHOOKS_ALLOW_PRIVATE": value}
    read = Settings.from_env({"FERRY_HOME": "/tmp/h", **env}).webhooks_allow_private
    assert read is setting
    assert private_webhooks_allowed(read, embedded=True) is embedded
    assert private_webhooks_allowed(read, embedded=False) is deployment


def queued(url: str, *seqs: int) -> list[Delivery]:
    found, _ = notifications_of(RUN, LOG, 0, None, "stopped by user")
    return [Delivery(url=url, notification=n) for n in found if n.seq in seqs]


def test_a_failing_webhook_costs_one_attempt_per_batch_and_no_other_waits() -> None:
    lanes = WebhookLanes(NotifyBatch(deliveries=queued("http://a/", 0, 2, 3) + queued("http://b/", 0)))
    assert lanes.new == ["http://a/", "http://b/"]
    assert lanes.deadline("http://a/", 100.0) == DELIVERY_DEADLINE  # retried for an hour from now
    assert lanes.deadline("http://a/", 1900.0) == DELIVERY_DEADLINE / 2  # its first try is kept
    lanes.delivered("http://b/")
    assert [d.notification.seq for d in lanes.given_up("http://a/")] == [0]  # the head only, after its hour
    assert lanes.deadline("http://a/", 3700.0) is None  # failing: one attempt
    assert [d.notification.seq for d in lanes.given_up("http://a/")] == [2, 3]  # that failed: the rest too
    lanes.take(NotifyBatch(deliveries=queued("http://a/", 4), last=True))
    assert lanes.new == ["http://a/", "http://b/"] and lanes.deadline("http://a/", 3800.0) is None
    lanes.delivered("http://a/")  # it answers again: retried as before
    assert lanes.done() and "http://a/" not in lanes.failing
    assert (lanes.result.delivered, lanes.result.given_up_total) == (2, 3)
    assert lanes.result.given_up == ["r-1-0 http://a/", "r-1-2 http://a/", "r-1-3 http://a/"]


def test_before_the_bound_a_give_up_takes_the_head_only() -> None:
    lanes = WebhookLanes(NotifyBatch(deliveries=queued("http://a/", 0, 2, 3)))
    assert len(lanes.given_up("http://a/", coalesce=False)) == 1
    assert len(lanes.given_up("http://a/", coalesce=False)) == 1
    assert not lanes.failing


def test_what_a_continued_notifier_carries_is_what_it_had() -> None:
    lanes = WebhookLanes(
        NotifyBatch(deliveries=queued("http://a/", 0, 2) + queued("http://b/", 0, 3), history_limit=50)
    )
    lanes.deadline("http://b/", 10.0)
    lanes.given_up("http://a/")
    assert not lanes.continue_due(49, False) and lanes.continue_due(50, False)
    assert not lanes.continue_due(30, True) and lanes.continue_due(SUGGESTED_FLOOR, True)
    carried = lanes.carried()
    assert [(d.url, d.notification.seq) for d in carried.deliveries] == [
        ("http://a/", 2), ("http://b/", 0), ("http://b/", 3)
    ]  # fmt: skip
    after = WebhookLanes(NotifyBatch.model_validate_json(carried.model_dump_json()))
    assert (after.failing, after.since, after.history_limit) == ({"http://a/"}, {"http://b/": 10.0}, 50)
    assert after.result == lanes.result and after.new == ["http://a/", "http://b/"]
    assert after.deadline("http://b/", 10.0 + DELIVERY_DEADLINE.total_seconds() + 60) == LAST_TRY
    after.take(NotifyBatch(deliveries=[], last=True))
    assert [len(after.given_up(url)) for url in ("http://a/", "http://b/", "http://b/")] == [1, 1, 1]
    assert after.done() and not after.continue_due(10_000, True)


def test_a_result_names_the_last_deliveries_given_up_and_counts_them_all() -> None:
    lanes = WebhookLanes(NotifyBatch(deliveries=queued("http://a/", 0) * (GIVEN_UP_KEPT + 5)))
    for _ in range(GIVEN_UP_KEPT + 5):
        lanes.given_up("http://a/", coalesce=False)
    assert (len(lanes.result.given_up), lanes.result.given_up_total) == (GIVEN_UP_KEPT, GIVEN_UP_KEPT + 5)
