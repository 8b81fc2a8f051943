"""When a failed job may be retried, by its run's retry policy (`retry` in a configuration, parsed in
core.configuration.retry), and the pending backoff: docs/runs.md, "When a job may be retried"."""

from __future__ import annotations

from enum import StrEnum

from core.configuration.retry import RetryPolicy
from core.status import JobTerminationReason


class RetryVerdict(StrEnum):
    """What the retry policy says about one failed job."""

    RETRY = "retry"
    NOT_RETRYABLE = "not-retryable"  # retry disabled, or the reason's event is not in `on_events`
    LIMIT_EXCEEDED = "limit-exceeded"  # the event is covered, but `retry.duration` has run out


# Seconds a PENDING run waits before its n-th resubmission (0-based); the last entry repeats.
PENDING_BACKOFF_SCHEDULE: tuple[int, ...] = (15, 30, 60, 120, 300, 600)


def retry_event_allowed(policy: RetryPolicy | None, reason: JobTerminationReason) -> bool:
    """Whether `policy` enables retrying a job that terminated for `reason` (window not considered)."""
    if policy is None:
        return False
    event = reason.to_retry_event()
    return event is not None and event in policy.on_events


def retry_window_start(*, first_submitted_at: float, last_provisioned_at: float | None) -> float:
    """When a failed job's retry clock started.

    `first_submitted_at` is the job's first submission; `last_provisioned_at` the last moment any of its
    submissions held an instance (None if none ever did). A job that never got an instance (the usual
    no-capacity case) counts from its first submission. Once it has held one, every event, no-capacity
    included, counts from losing it, as dstack does: a long run preempted late, whose resubmission then
    finds no capacity for a while, is not failed by the hours it spent running.
    """
    return first_submitted_at if last_provisioned_at is None else last_provisioned_at


def within_retry_window(
    policy: RetryPolicy | None,
    reason: JobTerminationReason,
    *,
    now: float,
    first_submitted_at: float,
    last_provisioned_at: float | None,
) -> bool:
    """Whether `now` is still within `policy.duration` of the retry clock's start (inclusive).

    False without a policy or for a reason that is never retried: there is no window to be within.
    """
    if policy is None or reason.to_retry_event() is None:
        return False
    start = retry_window_start(first_submitted_at=first_submitted_at, last_provisioned_at=last_provisioned_at)
    return now - start <= policy.duration


def decide_retry(
    policy: RetryPolicy | None,
    reason: JobTerminationReason,
    *,
    now: float,
    first_submitted_at: float,
    last_provisioned_at: float | None,
) -> RetryVerdict:
    """The three rules of 'when can the job be retried' (docs/runs.md), in order."""
    if not retry_event_allowed(policy, reason):
        return RetryVerdict.NOT_RETRYABLE
    if not within_retry_window(
        policy,
        reason,
        now=now,
        first_submitted_at=first_submitted_at,
        last_provisioned_at=last_provisioned_at,
    ):
        return RetryVerdict.LIMIT_EXCEEDED
    return RetryVerdict.RETRY


def pending_backoff(attempt: int) -> int:
    """Seconds to wait before resubmitting a PENDING run for the `attempt`-th time (0-based)."""
    if attempt < 0:
        raise ValueError(f"a retry attempt cannot be negative, got {attempt}")
    return PENDING_BACKOFF_SCHEDULE[min(attempt, len(PENDING_BACKOFF_SCHEDULE) - 1)]
