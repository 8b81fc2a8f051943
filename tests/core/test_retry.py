"""The retry decision ("when can the job be retried?") and the backoff of STEP 3, docs/runs.md."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.configuration.retry import RetryPolicy
from core.eventlog import Event
from core.runs.retry import (
    PENDING_BACKOFF_SCHEDULE,
    RetryClock,
    RetryVerdict,
    decide_retry,
    pending_backoff,
    remember_run,
    restarting_window_start,
    retry_event_allowed,
    retry_window_start,
    within_retry_window,
)
from core.runs.state_machine import replay_run
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


def clock(first: float = 0, last: float | None = None, **fields: Any) -> RetryClock:
    return RetryClock(first_submitted_at=first, last_provisioned_at=last, **fields)


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
def test_within_retry_window_of_a_first_failure(
    reason: R, now: float, first: float, last: float | None, inside: bool
) -> None:
    assert within_retry_window(HOUR, reason, now=now, clock=clock(first, last)) is inside


def test_no_capacity_vs_interruption_windows_start_at_different_moments() -> None:
    # Never provisioned: the clock started at the first submission; provisioned: at the last time it held one.
    assert retry_window_start(first_submitted_at=100, last_provisioned_at=None) == 100
    assert retry_window_start(first_submitted_at=100, last_provisioned_at=900) == 900


def test_within_retry_window_without_policy_is_false() -> None:
    assert not within_retry_window(None, NO_CAPACITY, now=0, clock=clock())


def test_no_window_starts_before_the_runs_cycle() -> None:
    """A scheduled run's new cycle, whose job last held an instance in the cycle before."""
    assert not within_retry_window(HOUR, NO_CAPACITY, now=9000, clock=clock(0, 1000))
    assert within_retry_window(HOUR, NO_CAPACITY, now=9000, clock=clock(0, 1000), not_before=8000)


TEN_MINUTES = RetryPolicy(on_events=["error", "interruption", "no-capacity"], duration="10m")


def test_case_a_failures_at_once_after_each_placement_count_from_the_first() -> None:
    """A job that fails a second after each placement: its retries' failures do not restart the window
    (dstack's clock would, and retry it for ever); past `duration` since the first failure, no more."""
    # Submission 0 ran 1 s and failed at 2 (its first failure: the window opens there); submission 1
    # failed alike at 19; the latest ran from 600 to 601.
    runs = remember_run(remember_run((), 1, 2), 1, 19)
    latest = clock(0, 601, running_at=600, first_window=2, runs=runs)
    assert latest.window_start(600) == 2
    assert decide_retry(TEN_MINUTES, EXITED, now=602, clock=latest) == RetryVerdict.RETRY
    later = latest.model_copy(update={"running_at": 602, "last_provisioned_at": 603})
    assert decide_retry(TEN_MINUTES, EXITED, now=603, clock=later) == RetryVerdict.LIMIT_EXCEEDED


def test_case_a_a_first_failure_opens_its_window_where_it_lost_its_instance() -> None:
    first_failure = clock(0, 5000, running_at=4999)
    assert decide_retry(TEN_MINUTES, EXITED, now=5000, clock=first_failure) == RetryVerdict.RETRY


def test_case_b_a_job_preempted_after_each_long_run_is_retried_each_time() -> None:
    """Each run longer than `duration` ended the retrying before it: the window starts where it ended."""
    runs = remember_run((), 10_000, 10_002)  # ran 10 000 s, preempted: the first failure, window at 10 002
    latest = clock(0, 20_020, running_at=10_020, first_window=10_002, runs=runs)  # ran 10 000 s too
    assert latest.window_start(600) == 20_020
    assert decide_retry(TEN_MINUTES, INTERRUPTED, now=20_021, clock=latest) == RetryVerdict.RETRY
    # Its resubmission then waits for capacity: that counts from the preemption, not from the hours run.
    waiting = clock(0, 20_020, first_window=10_002, runs=remember_run(runs, 10_000, 20_020))
    assert decide_retry(TEN_MINUTES, NO_CAPACITY, now=20_620, clock=waiting) == RetryVerdict.RETRY
    assert decide_retry(TEN_MINUTES, NO_CAPACITY, now=20_621, clock=waiting) == RetryVerdict.LIMIT_EXCEEDED


def test_case_b_a_long_run_after_failures_at_once_starts_a_new_window() -> None:
    runs = remember_run(remember_run((), 1, 2), 5000, 5050)
    after = clock(0, 5100, running_at=5099, first_window=2, runs=runs)
    assert after.window_start(600) == 5050
    assert after.window_start(6000) == 2  # with a window longer than that run, it was still retrying


def test_a_run_no_longer_than_the_window_does_not_restart_it() -> None:
    latest = clock(0, 1500, running_at=900, first_window=100, runs=remember_run((), 10, 100))
    assert latest.window_start(600) == 100  # ran exactly 600 s: not longer
    assert latest.window_start(599) == 1500


def test_case_c_waiting_for_capacity_counts_from_the_first_submission() -> None:
    waiting = clock(1000, None, first_window=1000)
    assert decide_retry(TEN_MINUTES, NO_CAPACITY, now=1600, clock=waiting) == RetryVerdict.RETRY
    assert decide_retry(TEN_MINUTES, NO_CAPACITY, now=1601, clock=waiting) == RetryVerdict.LIMIT_EXCEEDED


def test_a_run_begun_before_the_retry_window_patch_restarts_the_window_at_each_failure() -> None:
    """`restarts` (RunMachine.retry_window_restarts, a run begun before the patch `retry-window`): the
    window as it was counted then, from the latest submission alone. Case a's job, failing a second after
    each placement, is still retried 600 s after its first failure: its latest failure opened a window."""
    runs = remember_run(remember_run((), 1, 2), 1, 19)
    later = clock(0, 603, running_at=602, first_window=2, runs=runs)
    assert decide_retry(TEN_MINUTES, EXITED, now=603, clock=later) == RetryVerdict.LIMIT_EXCEEDED
    assert decide_retry(TEN_MINUTES, EXITED, now=603, clock=later, restarts=True) == RetryVerdict.RETRY
    assert restarting_window_start(later) == 603
    # Never provisioned: from its first submission, as both rules count it.
    waiting = clock(1000, None, first_window=1000)
    assert decide_retry(TEN_MINUTES, NO_CAPACITY, now=1601, clock=waiting, restarts=True) == (
        RetryVerdict.LIMIT_EXCEEDED
    )


def test_before_the_retry_window_patch_only_the_first_submission_is_clamped_to_the_cycle() -> None:
    """The clamp of the old count: `max(first submission, the cycle's start)`, then `retry_window_start`;
    a job that last held an instance in an earlier cycle counts from then (the new count clamps the
    window's start itself: `test_no_window_starts_before_the_runs_cycle`)."""
    assert restarting_window_start(clock(0, None), not_before=8000) == 8000
    assert restarting_window_start(clock(0, 1000), not_before=8000) == 1000
    assert not within_retry_window(
        HOUR, NO_CAPACITY, now=9000, clock=clock(0, 1000), not_before=8000, restarts=True
    )


@given(
    now=st.floats(0, 1e5),
    first=st.floats(0, 1e5),
    last=st.none() | st.floats(0, 1e5),
    not_before=st.none() | st.floats(0, 1e5),
    running_at=st.none() | st.floats(0, 1e5),
    first_window=st.none() | st.floats(0, 1e5),
    runs=st.lists(st.tuples(st.floats(0, 1e5), st.floats(0, 1e5)), max_size=4),
    duration=st.integers(0, 10**5),
)
def test_before_the_retry_window_patch_the_window_is_counted_as_it_was(
    now: float,
    first: float,
    last: float | None,
    not_before: float | None,
    running_at: float | None,
    first_window: float | None,
    runs: list[tuple[float, float]],
    duration: int,
) -> None:
    """With `restarts`, the window is the expression of the release before the patch, whatever the
    run's log says of the earlier submissions (which that release did not keep)."""
    policy = RetryPolicy(on_events=["error"], duration=duration)
    kept = clock(first, last, running_at=running_at, first_window=first_window, runs=tuple(runs))
    start = first if not_before is None else max(first, not_before)
    old = now - retry_window_start(first_submitted_at=start, last_provisioned_at=last) <= duration
    assert (
        within_retry_window(policy, EXITED, now=now, clock=kept, not_before=not_before, restarts=True) is old
    )


def test_remember_run_keeps_only_runs_that_may_still_start_a_window() -> None:
    runs = remember_run(remember_run(remember_run((), 50, 100), 500, 1000), 20, 1100)
    assert runs == ((500, 1000), (20, 1100))
    assert remember_run(runs, 500, 2000) == ((500, 2000),)


@given(
    submissions=st.lists(st.tuples(st.floats(0, 10_000), st.floats(0, 10_000)), max_size=12),
    duration=st.integers(0, 20_000),
)
def test_the_kept_runs_start_the_windows_all_runs_would(
    submissions: list[tuple[float, float]], duration: int
) -> None:
    """`remember_run` drops no run `window_start` would use, whatever the duration; and a window never
    starts later than the last time the job held an instance, where dstack's clock starts."""
    t = 0.0
    every: list[tuple[float, float]] = []
    kept: tuple[tuple[float, float], ...] = ()
    for ran, gap in submissions:
        t += gap + ran
        every.append((ran, t))
        kept = remember_run(kept, ran, t)
    first_failed = clock(0, t if submissions else None, first_window=0)
    start = first_failed.model_copy(update={"runs": kept}).window_start(duration)
    assert start == first_failed.model_copy(update={"runs": tuple(every)}).window_start(duration)
    assert 0 <= start <= t


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
    assert decide_retry(policy, reason, now=now, clock=clock(0, last)) == verdict


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
    verdict = decide_retry(policy, reason, now=now, clock=clock(first, last))
    allowed = retry_event_allowed(policy, reason)
    inside = within_retry_window(policy, reason, now=now, clock=clock(first, last))
    assert (verdict == RetryVerdict.NOT_RETRYABLE) == (not allowed)
    assert (verdict == RetryVerdict.RETRY) == (allowed and inside)


def ev(t: float, name: str, **context: Any) -> Event:
    return Event(timestamp=t, name=name, context=context)


def job_ev(t: float, name: str, submission: int, **context: Any) -> Event:
    return ev(t, name, replica=0, job=0, submission=submission, **context)


SUBMIT = ev(0, "submit", run_name="train", project="main", user="ana", type="task")
EXITED_1 = {
    "status": "failed",
    "reason": "container_exited_with_error",
    "exit_status": 1,
    "provisioned": True,
}


def test_the_runs_log_keeps_what_the_window_needs_as_submissions_replace_each_other() -> None:
    """core.runs.state_machine: a new submission keeps the window its job's first failure opened and the
    runs of the earlier ones (`RunState.retry_history`); the job's view hands them to `RetryClock`."""
    log = [SUBMIT, job_ev(1, "job-submit", 0), job_ev(2, "job-status", 0, status="running")]
    log += [job_ev(3, "job-finish", 0, **EXITED_1), job_ev(18, "job-submit", 1)]
    log += [job_ev(19, "job-status", 1, status="running"), job_ev(20, "job-finish", 1, **EXITED_1)]
    state = replay_run(log)
    [view] = state.job_views()
    assert (view.first_window, view.runs, view.running_at, view.last_provisioned_at) == (3, ((1, 3),), 19, 20)
    assert view.retry_clock().window_start(600) == 3  # the second failure counts from the first
    [view] = replay_run([*log, job_ev(50, "job-submit", 2)]).job_views()
    assert (view.first_window, view.runs, view.running_at) == (3, ((1, 20),), None)


def test_a_submission_replaced_while_it_still_ran_ran_until_it_was_replaced() -> None:
    """A node whose replica is resubmitted while it still runs (its stop not heard yet) ran until its new
    submission: if for longer than `retry.duration`, a failure of the new one counts from then."""
    log = [SUBMIT, job_ev(1, "job-submit", 0), job_ev(10, "job-status", 0, status="running")]
    state = replay_run([*log, job_ev(5000, "job-submit", 1)])
    [view] = state.job_views()
    assert (view.first_window, view.runs) == (None, ((4990, 5000),))
    assert view.retry_clock().window_start(600) == 5000
