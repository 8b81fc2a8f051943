"""The retry decision ("when can the job be retried?") and the backoff of STEP 3, docs/runs.md."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.configuration.retry import RetryPolicy
from core.runs.retry import (
    PENDING_BACKOFF_SCHEDULE,
    RetryVerdict,
    decide_retry,
    pending_backoff,
    retry_event_allowed,
    retry_window_start,
    within_retry_window,
)
from core.status import JobStatus, JobTerminationReason, RetryEvent

R = JobTerminationReason
NO_CAPACITY = R.FAILED_TO_START_DUE_TO_NO_CAPACITY
INTERRUPTED = R.INTERRUPTED_BY_NO_CAPACITY
EXITED = R.CONTAINER_EXITED_WITH_ERROR
HOUR = RetryPolicy(duration="1h")


@pytest.mark.parametrize(
    ("reason", "event"),
    [
        (NO_CAPACITY, RetryEvent.NO_CAPACITY),
        (INTERRUPTED, RetryEvent.INTERRUPTION),
        (R.INSTANCE_UNREACHABLE, RetryEvent.INTERRUPTION),
        (EXITED, RetryEvent.ERROR),
        (R.EXECUTOR_ERROR, RetryEvent.ERROR),
        (R.WAITING_RUNNER_LIMIT_EXCEEDED, RetryEvent.ERROR),
        (R.DONE_BY_RUNNER, None),
        (R.TERMINATED_BY_USER, None),
        (R.ABORTED_BY_USER, None),
        (R.TERMINATED_BY_SERVER, None),
        (R.SCALED_DOWN, None),
        (R.MAX_DURATION_EXCEEDED, None),
    ],
    ids=lambda v: str(v),
)
def test_001_termination_reason_maps_to_retry_event(reason: R, event: RetryEvent | None) -> None:
    assert reason.to_retry_event() == event


def test_001_every_failed_reason_has_a_retry_event_and_no_other_does() -> None:
    for reason in R:
        assert (reason.to_retry_event() is not None) == (reason.to_status() == JobStatus.FAILED)


@pytest.mark.parametrize(
    ("policy", "reason", "allowed"),
    [
        pytest.param(None, INTERRUPTED, False, id="000-retry-disabled"),
        pytest.param(RetryPolicy(), NO_CAPACITY, True, id="000-retry-true-covers-no-capacity"),
        pytest.param(RetryPolicy(), INTERRUPTED, True, id="000-retry-true-covers-interruption"),
        pytest.param(RetryPolicy(), EXITED, True, id="000-retry-true-covers-error"),
        pytest.param(
            RetryPolicy(on_events=["no-capacity"]), INTERRUPTED, False, id="000-event-not-in-on-events"
        ),
        pytest.param(RetryPolicy(on_events=["error"]), EXITED, True, id="000-event-in-on-events"),
        pytest.param(RetryPolicy(on_events=[]), NO_CAPACITY, False, id="000-empty-on-events"),
        pytest.param(RetryPolicy(), R.TERMINATED_BY_USER, False, id="000-stop-never-retried"),
        pytest.param(RetryPolicy(), R.DONE_BY_RUNNER, False, id="000-done-never-retried"),
    ],
)
def test_retry_event_allowed(policy: RetryPolicy | None, reason: R, allowed: bool) -> None:
    assert retry_event_allowed(policy, reason) is allowed


@pytest.mark.parametrize(
    ("reason", "now", "first", "last", "inside"),
    [
        pytest.param(
            NO_CAPACITY, 3600, 0, None, True, id="no-capacity-from-first-submission-boundary-inside"
        ),
        pytest.param(NO_CAPACITY, 3601, 0, None, False, id="no-capacity-from-first-submission-exceeded"),
        pytest.param(
            NO_CAPACITY, 4000, 1000, None, True, id="no-capacity-counts-from-this-jobs-first-submission"
        ),
        pytest.param(INTERRUPTED, 5000, 0, 4000, True, id="interruption-from-last-provisioning-inside"),
        pytest.param(INTERRUPTED, 7601, 0, 4000, False, id="interruption-from-last-provisioning-exceeded"),
        pytest.param(EXITED, 5000, 0, 4000, True, id="error-from-last-provisioning"),
        pytest.param(INTERRUPTED, 3000, 0, None, True, id="never-provisioned-falls-back-to-first-submission"),
        pytest.param(EXITED, 3601, 0, None, False, id="never-provisioned-fallback-exceeded"),
        # A job that ran, lost its instance and then found no capacity counts from the loss (as dstack does).
        pytest.param(
            NO_CAPACITY, 5000, 0, 4000, True, id="no-capacity-after-holding-an-instance-from-the-loss"
        ),
        pytest.param(R.TERMINATED_BY_USER, 10, 0, None, False, id="never-retried-reason-has-no-window"),
    ],
)
def test_within_retry_window(reason: R, now: float, first: float, last: float | None, inside: bool) -> None:
    assert (
        within_retry_window(HOUR, reason, now=now, first_submitted_at=first, last_provisioned_at=last)
        is inside
    )


def test_no_capacity_vs_interruption_windows_start_at_different_moments() -> None:
    # Never provisioned: the clock started at the first submission; provisioned: at the last time it held one.
    assert retry_window_start(first_submitted_at=100, last_provisioned_at=None) == 100
    assert retry_window_start(first_submitted_at=100, last_provisioned_at=900) == 900


def test_within_retry_window_without_policy_is_false() -> None:
    assert not within_retry_window(None, NO_CAPACITY, now=0, first_submitted_at=0, last_provisioned_at=None)


@pytest.mark.parametrize(
    ("policy", "reason", "now", "last", "verdict"),
    [
        pytest.param(None, NO_CAPACITY, 10, None, RetryVerdict.NOT_RETRYABLE, id="000-retry-disabled"),
        pytest.param(
            RetryPolicy(on_events=["error"]),
            NO_CAPACITY,
            10,
            None,
            RetryVerdict.NOT_RETRYABLE,
            id="000-not-covered",
        ),
        pytest.param(HOUR, NO_CAPACITY, 10, None, RetryVerdict.RETRY, id="000-covered-within-duration"),
        pytest.param(HOUR, NO_CAPACITY, 3700, None, RetryVerdict.LIMIT_EXCEEDED, id="000-duration-exceeded"),
        pytest.param(
            HOUR, INTERRUPTED, 7000, 6000, RetryVerdict.RETRY, id="000-duration-restarts-on-provisioning"
        ),
        pytest.param(
            RetryPolicy(duration="1d"),
            EXITED,
            80000,
            None,
            RetryVerdict.RETRY,
            id="000-duration-from-configuration",
        ),
    ],
)
def test_decide_retry(
    policy: RetryPolicy | None, reason: R, now: float, last: float | None, verdict: RetryVerdict
) -> None:
    assert decide_retry(policy, reason, now=now, first_submitted_at=0, last_provisioned_at=last) == verdict


@pytest.mark.parametrize(
    ("attempt", "seconds"),
    [(0, 15), (1, 30), (2, 60), (3, 120), (4, 300), (5, 600), (6, 600), (100, 600)],
)
def test_001_STEP3_pending_backoff_schedule(attempt: int, seconds: int) -> None:
    assert pending_backoff(attempt) == seconds


def test_pending_backoff_rejects_negative_attempts() -> None:
    with pytest.raises(ValueError, match="negative"):
        pending_backoff(-1)


@given(st.integers(min_value=0, max_value=10_000))
def test_pending_backoff_grows_and_is_capped(attempt: int) -> None:
    assert pending_backoff(attempt) <= pending_backoff(attempt + 1) <= PENDING_BACKOFF_SCHEDULE[-1] == 600


@given(
    reason=st.sampled_from(list(R)),
    now=st.floats(0, 1e7),
    first=st.floats(0, 1e7),
    last=st.none() | st.floats(0, 1e7),
    events=st.lists(st.sampled_from(list(RetryEvent)), unique=True),
    duration=st.integers(0, 10**6),
)
def test_decide_retry_agrees_with_its_parts(
    reason: R, now: float, first: float, last: float | None, events: list[RetryEvent], duration: int
) -> None:
    policy = RetryPolicy(on_events=events, duration=duration)
    verdict = decide_retry(policy, reason, now=now, first_submitted_at=first, last_provisioned_at=last)
    allowed = retry_event_allowed(policy, reason)
    inside = within_retry_window(policy, reason, now=now, first_submitted_at=first, last_provisioned_at=last)
    assert (verdict == RetryVerdict.NOT_RETRYABLE) == (not allowed)
    assert (verdict == RetryVerdict.RETRY) == (allowed and inside)
