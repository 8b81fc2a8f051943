"""Lifecycle rules of a run: the status derivation of docs/runs.md STEP 2 and the replica-restart decision.

`RunWorkflow` calls `derive_run_status` on the latest submission of every job each time a job changes,
and acts on the `RunDecision`: it is the only place a run's status is decided, and it is pure.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.configuration.retry import RetryPolicy
from core.runs.retry import RetryClock, RetryVerdict, Run, decide_retry, pending_backoff
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason

StopCriteria = Literal["all-done", "master-done"]

MASTER_REPLICA = 0
MASTER_JOB = 0


class JobView(BaseModel):
    """The latest submission of one job, as the run sees it.

    `first_submitted_at` is the first submission of this (replica, job) in the run's current cycle: the
    no-capacity retry clock starts there. `last_provisioned_at` is the last moment any submission of this
    job held an instance (for a submission that has finished, the time it finished; None if no submission
    ever got one): the window of a first failure after the job held one starts there. `running_at`,
    `first_window` and `runs` say which later failure starts a new window (`core.runs.retry.RetryClock`).
    A job that is TERMINATING or finished has a termination reason; a finished status must be the one
    that reason leads to.
    """

    model_config = ConfigDict(frozen=True)

    replica_num: int = Field(ge=0)
    job_num: int = Field(ge=0)
    submission_num: int = Field(default=0, ge=0)
    status: JobStatus
    termination_reason: JobTerminationReason | None = None
    exit_status: int | None = None
    first_submitted_at: float
    last_provisioned_at: float | None = None
    running_at: float | None = None  # when this submission was first RUNNING
    first_window: float | None = None  # the window the job's first failure opened (an earlier submission)
    runs: tuple[Run, ...] = ()  # earlier submissions that ran

    @model_validator(mode="after")
    def _reason_agrees_with_status(self) -> JobView:
        stopping = self.status == JobStatus.TERMINATING or self.status.is_finished()
        if stopping and self.termination_reason is None:
            raise ValueError(f"a {self.status} job needs a termination reason")
        if not stopping and self.termination_reason is not None:
            raise ValueError(f"a {self.status} job cannot have a termination reason")
        if self.status.is_finished() and self.termination_reason is not None:
            expected = self.termination_reason.to_status()
            if expected != self.status:
                raise ValueError(f"{self.termination_reason} leads to {expected}, not {self.status}")
        return self

    @property
    def is_master(self) -> bool:
        return self.replica_num == MASTER_REPLICA and self.job_num == MASTER_JOB

    def retry_clock(self) -> RetryClock:
        return RetryClock(
            first_submitted_at=self.first_submitted_at,
            last_provisioned_at=self.last_provisioned_at,
            running_at=self.running_at,
            first_window=self.first_window,
            runs=self.runs,
        )


class RunDecision(BaseModel):
    """What STEP 2 decided for an active run.

    `replicas_to_resubmit`: replicas whose latest jobs failed retryably. The workflow terminates their
    still-active jobs (`jobs_to_stop`) and gives every job of each a new SUBMITTED submission: at once
    (in place) when the status is not PENDING, after `retry_at` when it is. A PENDING decision with no
    replicas to resubmit means nothing contributes any more (a service scaled to zero).
    """

    model_config = ConfigDict(frozen=True)

    status: RunStatus
    termination_reason: RunTerminationReason | None = None
    replicas_to_resubmit: list[int] = Field(default_factory=list)
    retry_at: float | None = None

    @property
    def resubmit_in_place(self) -> bool:
        return bool(self.replicas_to_resubmit) and self.status != RunStatus.PENDING


class _Kind(Enum):
    """What one job contributes to the derivation."""

    IGNORED = "ignored"
    DONE = "done"
    RUNNING = "running"
    PROVISIONING = "provisioning"
    SUBMITTED = "submitted"
    FAILED = "failed"


# When several jobs fail for different reasons, the run reports the first of these that applies:
# a user's explicit action explains the end best, then a real failure, then running out of retries.
_RUN_REASON_PRIORITY = (
    RunTerminationReason.ABORTED_BY_USER,
    RunTerminationReason.STOPPED_BY_USER,
    RunTerminationReason.INACTIVITY_DURATION_EXCEEDED,
    RunTerminationReason.JOB_FAILED,
    RunTerminationReason.RETRY_LIMIT_EXCEEDED,
)


def _kind(job: JobView) -> _Kind:
    reason = job.termination_reason
    if reason == JobTerminationReason.SCALED_DOWN:
        return _Kind.IGNORED  # docs/runs.md: SCALED_DOWN jobs do not contribute to the run status
    if reason is not None:
        # TERMINATING or finished: a job that exited 0 is done (or about to be); anything else failed.
        return _Kind.DONE if reason.to_status() == JobStatus.DONE else _Kind.FAILED
    if job.status == JobStatus.RUNNING:
        return _Kind.RUNNING
    if job.status in (JobStatus.PROVISIONING, JobStatus.PULLING):
        return _Kind.PROVISIONING
    return _Kind.SUBMITTED


def run_reason_for_job_failure(reason: JobTerminationReason, verdict: RetryVerdict) -> RunTerminationReason:
    """The run termination reason a non-retryable job failure leads to."""
    if reason == JobTerminationReason.ABORTED_BY_USER:
        return RunTerminationReason.ABORTED_BY_USER
    if reason == JobTerminationReason.TERMINATED_BY_USER:
        return RunTerminationReason.STOPPED_BY_USER
    if reason == JobTerminationReason.INACTIVITY_DURATION_EXCEEDED:
        return RunTerminationReason.INACTIVITY_DURATION_EXCEEDED
    if verdict == RetryVerdict.LIMIT_EXCEEDED:
        return RunTerminationReason.RETRY_LIMIT_EXCEEDED
    return RunTerminationReason.JOB_FAILED


def derive_run_status(
    jobs: list[JobView],
    *,
    stop_criteria: StopCriteria,
    retry: RetryPolicy | None,
    now: float,
    run_submitted_at: float,
    attempt: int = 0,
    retry_window_restarts: bool = False,
    array: bool = False,
    elements_left: int = 0,
) -> RunDecision:
    """docs/runs.md STEP 2: an active run's next status from the latest submission of each of its jobs.

    Priority order: a non-retryable failure (TERMINATING with its reason); `master-done` with the master
    job (replica 0, job 0) done (TERMINATING, ALL_JOBS_DONE); any RUNNING; any PROVISIONING or PULLING;
    any SUBMITTED; every contributing job DONE (TERMINATING, ALL_JOBS_DONE); otherwise PENDING.
    A job failed retryably makes its whole replica retry (docs/runs.md: all jobs of a replica go together).
    Retrying replicas are resubmitted in place while another replica is active, and do not contribute
    to the status; if nothing else is active, the run goes PENDING until `now + pending_backoff(attempt)`.
    `run_submitted_at` is when the run's current cycle began (its submission, or a scheduled run's
    trigger): no retry clock starts before it. `retry_window_restarts`: a run begun before the patch
    `retry-window` counts each failure's window as it did then (`core.runs.retry.restarting_window_start`).
    `array`: the replicas are an array's elements (core.runs.arrays), `elements_left` of them not started
    yet, which the run starts next. A job of an array that failed for good ends only its element: the run
    goes on while any other element is active, retrying or left, and then ends with the failure's reason.
    """
    # One pass for every job's kind; only a replica with a failed job needs its jobs together (an array's
    # thousand elements are derived again at each of its news).
    kinds = [_kind(job) for job in jobs]
    failed: dict[int, list[JobView]] = {}
    for job, kind in zip(jobs, kinds, strict=True):
        if kind is _Kind.FAILED:
            failed.setdefault(job.replica_num, []).append(job)

    failures: set[RunTerminationReason] = set()
    retrying: list[int] = []
    for replica_num in sorted(failed):
        needs_retry = False
        for job in failed[replica_num]:
            assert job.termination_reason is not None  # JobView guarantees it for failed jobs
            verdict = decide_retry(
                retry,
                job.termination_reason,
                now=now,
                clock=job.retry_clock(),
                not_before=run_submitted_at,
                restarts=retry_window_restarts,
            )
            if verdict == RetryVerdict.RETRY:
                needs_retry = True
            else:
                failures.add(run_reason_for_job_failure(job.termination_reason, verdict))
        if needs_retry:
            retrying.append(replica_num)

    # What the replicas not retrying contribute (a retrying replica's other jobs do not).
    skipped = {_Kind.IGNORED, _Kind.FAILED}
    if retrying:
        retrying_set = set(retrying)
        remaining = {
            kind
            for job, kind in zip(jobs, kinds, strict=True)
            if kind not in skipped and job.replica_num not in retrying_set
        }
    else:
        remaining = set(kinds) - skipped
    active = remaining & {_Kind.RUNNING, _Kind.PROVISIONING, _Kind.SUBMITTED}
    goes_on = bool(active or retrying or elements_left)
    if failures and not (array and goes_on):
        reason = next(r for r in _RUN_REASON_PRIORITY if r in failures)
        return RunDecision(status=RunStatus.TERMINATING, termination_reason=reason)
    if stop_criteria == "master-done" and any(j.is_master and _kind(j) == _Kind.DONE for j in jobs):
        return RunDecision(
            status=RunStatus.TERMINATING, termination_reason=RunTerminationReason.ALL_JOBS_DONE
        )

    for kind, status in (
        (_Kind.RUNNING, RunStatus.RUNNING),
        (_Kind.PROVISIONING, RunStatus.PROVISIONING),
        (_Kind.SUBMITTED, RunStatus.SUBMITTED),
    ):
        if kind in remaining:
            # Some replica is still active, so the retrying ones (if any) are resubmitted in place.
            return RunDecision(status=status, replicas_to_resubmit=retrying)
    if elements_left:
        # The next elements start now, the retrying ones resubmitted beside them: still RUNNING once an
        # element has ended (as Slurm shows an array), SUBMITTED before.
        status = RunStatus.RUNNING if remaining or failures else RunStatus.SUBMITTED
        return RunDecision(status=status, replicas_to_resubmit=retrying)
    if remaining and not retrying:
        return RunDecision(
            status=RunStatus.TERMINATING, termination_reason=RunTerminationReason.ALL_JOBS_DONE
        )
    # All remaining work is retryable (or nothing contributes at all): wait, then resubmit.
    retry_at = now + pending_backoff(attempt) if retrying else None
    return RunDecision(status=RunStatus.PENDING, replicas_to_resubmit=retrying, retry_at=retry_at)


def jobs_to_stop(jobs: list[JobView], replicas: list[int]) -> list[JobView]:
    """The jobs of `replicas` the workflow must terminate before resubmitting them: still running ones.

    Jobs already TERMINATING or finished need nothing more; their new submissions replace them.
    """
    wanted = set(replicas)
    return [
        j
        for j in jobs
        if j.replica_num in wanted and j.status.is_active() and j.status != JobStatus.TERMINATING
    ]
