"""When a failed job may be retried, by its run's retry policy (`retry` in a configuration, parsed in
core.configuration.retry), and the pending backoff: docs/runs.md, "When a job may be retried".

The retry window follows dstack's documentation of `retry.duration` ("The maximum period of retrying the
run ... calculated as a run age for `no-capacity` event and as a time passed since the last `interruption`
and `error` for `interruption` and `error` events": `ProfileRetry.duration` in dstack's
src/dstack/_internal/core/models/profiles.py, and mkdocs/docs/concepts/tasks.md, "Retry duration") and
its code (`_should_retry_job` in src/dstack/_internal/server/background/pipeline_tasks/runs/active.py:
the run's age while the job never got an instance, else the time since the last submission that had one
was last processed). Both restart the clock at every failure of a submission that got an instance, so a
job that fails at once after each placement is retried for ever. Ferry departs from that, on purpose:
a failure restarts the window only if the job had recovered from the retrying before it, i.e. a
submission ran (RUNNING) for longer than `retry.duration`; the failures of retries that did not get that
far count in the window the first of them opened. See `RetryClock.window_start`. A run begun before
that change (the patch `retry-window`) keeps the count it began with: `restarting_window_start`.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from core.configuration.retry import RetryPolicy
from core.status import JobTerminationReason

# One earlier submission of a job that ran: (seconds it was RUNNING, when it stopped holding its instance).
Run = tuple[float, float]


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
    """Where the window of a job's first failure starts, as dstack's `_should_retry_job` counts it.

    `first_submitted_at` is the job's first submission; `last_provisioned_at` the last moment any of its
    submissions held an instance (None if none ever did). A job that never got an instance (the usual
    no-capacity case) counts from its first submission: dstack's "run age". Once it has held one, every
    event counts from losing it: dstack's "time passed since the last interruption or error", no-capacity
    included (dstack's docs say "run age" for no-capacity, but its code, and the example of its pull
    request 1282, count a job that lost its instance from the loss; Ferry does the same, or a long run
    preempted late, whose resubmission then waits for capacity, would fail by the hours it ran).
    """
    return first_submitted_at if last_provisioned_at is None else last_provisioned_at


def remember_run(runs: tuple[Run, ...], ran: float, ended: float) -> tuple[Run, ...]:
    """`runs` with one more (`ran`, `ended`), later than all of them. An earlier run that ran no longer
    than this one can no longer start a window (`RetryClock.window_start` takes the latest run longer
    than the duration): it is dropped, so the runs kept ran ever shorter, and there are few of them."""
    return (*(r for r in runs if r[0] > ran), (ran, ended))


class RetryClock(BaseModel):
    """What a job's submissions (of the run's current cycle) tell of its retry window, the policy aside.

    `first_submitted_at` and `last_provisioned_at` as in `retry_window_start`; `running_at` when the
    latest submission was first RUNNING (None: it never was); `first_window` the start of the window the
    job's first failure opened, if an earlier submission failed (None: the latest is its first failure);
    `runs` the earlier submissions that ran (`remember_run`).
    """

    model_config = ConfigDict(frozen=True)

    first_submitted_at: float
    last_provisioned_at: float | None = None
    running_at: float | None = None
    first_window: float | None = None
    runs: tuple[Run, ...] = ()

    def window_start(self, duration: float) -> float:
        """When the retry window of the latest submission's failure started.

        The first failure opens a window (`retry_window_start`); a later failure counts in it, so a job
        that fails at once after each placement is retried only for `duration`. A submission that ran
        for longer than `duration` shows the job had recovered: the window starts again where that run
        ended, so a job preempted after each long run is retried each time (the latest submission's own
        run included: a long run that fails is retried from its failure).
        """
        start = self.first_window
        if start is None:
            start = retry_window_start(
                first_submitted_at=self.first_submitted_at, last_provisioned_at=self.last_provisioned_at
            )
        runs = self.runs
        if self.running_at is not None and self.last_provisioned_at is not None:
            # The latest submission, stopping or stopped: it held its instance until last_provisioned_at.
            runs = (*runs, (self.last_provisioned_at - self.running_at, self.last_provisioned_at))
        return max([start, *(ended for ran, ended in runs if ran > duration)])


def within_retry_window(
    policy: RetryPolicy | None,
    reason: JobTerminationReason,
    *,
    now: float,
    clock: RetryClock,
    not_before: float | None = None,
    restarts: bool = False,
) -> bool:
    """Whether `now` is still within `policy.duration` of the retry window's start (inclusive).

    No window starts before `not_before` (the run's current cycle). False without a policy or for a
    reason that is never retried: there is no window to be within. `restarts`: the window of a run
    begun before the patch `retry-window` (`restarting_window_start`).
    """
    if policy is None or reason.to_retry_event() is None:
        return False
    if restarts:
        start = restarting_window_start(clock, not_before=not_before)
    else:
        start = clock.window_start(policy.duration)
        if not_before is not None:
            start = max(start, not_before)
    return now - start <= policy.duration


def restarting_window_start(clock: RetryClock, *, not_before: float | None = None) -> float:
    """The window as it was counted before the patch `retry-window`, which the runs begun before it keep
    (RunWorkflow reads the patch; `RunMachine.retry_window_restarts`): `retry_window_start` of the
    latest submission alone, so each failure after the job held an instance starts a new window; only
    the first submission is clamped to `not_before`, not the window's start."""
    first = clock.first_submitted_at if not_before is None else max(clock.first_submitted_at, not_before)
    return retry_window_start(first_submitted_at=first, last_provisioned_at=clock.last_provisioned_at)


def decide_retry(
    policy: RetryPolicy | None,
    reason: JobTerminationReason,
    *,
    now: float,
    clock: RetryClock,
    not_before: float | None = None,
    restarts: bool = False,
) -> RetryVerdict:
    """The three rules of 'when can the job be retried' (docs/runs.md), in order (`restarts`: as in
    `within_retry_window`)."""
    if not retry_event_allowed(policy, reason):
        return RetryVerdict.NOT_RETRYABLE
    if not within_retry_window(
        policy, reason, now=now, clock=clock, not_before=not_before, restarts=restarts
    ):
        return RetryVerdict.LIMIT_EXCEEDED
    return RetryVerdict.RETRY


def pending_backoff(attempt: int) -> int:
    """Seconds to wait before resubmitting a PENDING run for the `attempt`-th time (0-based)."""
    if attempt < 0:
        raise ValueError(f"a retry attempt cannot be negative, got {attempt}")
    return PENDING_BACKOFF_SCHEDULE[min(attempt, len(PENDING_BACKOFF_SCHEDULE) - 1)]
