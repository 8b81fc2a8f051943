"""docs/runs.md STEP 2: deriving a run's status from its jobs' latest submissions, and replica restarts."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from core.configuration.retry import RetryPolicy
from core.runs.derivation import (
    JobView,
    RunDecision,
    StopCriteria,
    derive_run_status,
    jobs_to_stop,
    run_reason_for_job_failure,
)
from core.runs.retry import RetryVerdict
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason

S = JobStatus
R = JobTerminationReason
RS = RunStatus
RR = RunTerminationReason
NOW = 1000.0


def job(
    replica: int,
    num: int,
    status: JobStatus,
    reason: JobTerminationReason | None = None,
    *,
    first: float = 0.0,
    provisioned: float | None = None,
) -> JobView:
    if reason is None and status.is_finished():
        reason = R.DONE_BY_RUNNER if status == S.DONE else None
    return JobView(
        replica_num=replica,
        job_num=num,
        status=status,
        termination_reason=reason,
        first_submitted_at=first,
        last_provisioned_at=provisioned,
    )


def failed(
    replica: int, num: int, reason: R, *, first: float = 0.0, provisioned: float | None = None
) -> JobView:
    """A finished job; despite the name, `reason` may be any, DONE_BY_RUNNER or SCALED_DOWN included."""
    return job(replica, num, reason.to_status(), reason, first=first, provisioned=provisioned)


def terminating(
    replica: int, num: int, reason: R, *, first: float = 0.0, provisioned: float | None = None
) -> JobView:
    return job(replica, num, S.TERMINATING, reason, first=first, provisioned=provisioned)


NO_CAP = R.FAILED_TO_START_DUE_TO_NO_CAPACITY
INTERRUPTED = R.INTERRUPTED_BY_NO_CAPACITY
EXITED = R.CONTAINER_EXITED_WITH_ERROR


@dataclass
class Case:
    id: str
    jobs: list[JobView]
    expect: tuple[RunStatus, RunTerminationReason | None]
    resubmit: list[int] = field(default_factory=list)
    stop_criteria: StopCriteria = "all-done"
    retry: RetryPolicy | None = field(default_factory=RetryPolicy)  # `retry: true`: every event, 1h
    now: float = NOW
    run_submitted_at: float = 0.0
    attempt: int = 0
    retry_at: float | None = None


FAILED = (RS.TERMINATING, RR.JOB_FAILED)
LIMIT = (RS.TERMINATING, RR.RETRY_LIMIT_EXCEEDED)
ALL_DONE = (RS.TERMINATING, RR.ALL_JOBS_DONE)
RUNNING, PROVISIONING, SUBMITTED, PENDING = (
    (s, None) for s in (RS.RUNNING, RS.PROVISIONING, RS.SUBMITTED, RS.PENDING)
)
ONLY_NO_CAPACITY = RetryPolicy(on_events=["no-capacity"])
MASTER: StopCriteria = "master-done"

CASES = [
    # Priority 1: a non-retryable failure, whatever else is going on.
    Case(
        "001-STEP2-non-retryable-failure-first",
        [job(0, 0, S.RUNNING), job(1, 0, S.RUNNING), failed(2, 0, EXITED)], FAILED, retry=ONLY_NO_CAPACITY,
    ),
    Case(
        "001-STEP2-non-retryable-failure-of-terminating-job",
        [job(0, 0, S.RUNNING), terminating(0, 1, EXITED)], FAILED, retry=None,
    ),
    Case(
        "001-STEP2-non-retryable-failure-before-master-done",
        [job(0, 0, S.DONE), failed(0, 1, EXITED)], FAILED, stop_criteria=MASTER, retry=ONLY_NO_CAPACITY,
    ),
    Case(
        "001-STEP2-non-retryable-beats-retryable-replica",
        [failed(0, 0, NO_CAP), failed(1, 0, EXITED)], FAILED, retry=ONLY_NO_CAPACITY,
    ),
    Case("000-STEP2-retry-disabled-JOB_FAILED", [failed(0, 0, INTERRUPTED)], FAILED, retry=None),
    Case("000-STEP2-event-not-covered", [failed(0, 0, INTERRUPTED)], FAILED, retry=ONLY_NO_CAPACITY),
    Case("000-STEP2-window-exceeded-RETRY_LIMIT_EXCEEDED", [failed(0, 0, NO_CAP)], LIMIT, now=3601.0),
    Case(
        "000-STEP2-window-exceeded-even-with-others-active",
        [job(0, 0, S.RUNNING), failed(1, 0, NO_CAP)], LIMIT, now=3601.0,
    ),
    Case(
        "001-STEP2-job-failure-reported-over-retry-limit",
        [failed(0, 0, NO_CAP), failed(1, 0, EXITED)], FAILED, retry=ONLY_NO_CAPACITY, now=5000.0,
    ),
    Case(
        "001-STEP2-stopped-by-user",
        [job(0, 0, S.RUNNING), failed(1, 0, R.TERMINATED_BY_USER)], (RS.TERMINATING, RR.STOPPED_BY_USER),
    ),
    Case(
        "001-STEP2-aborted-by-user-wins",
        [failed(0, 0, R.ABORTED_BY_USER), failed(1, 0, EXITED)], (RS.TERMINATING, RR.ABORTED_BY_USER),
    ),
    Case("001-STEP2-terminated-by-server-never-retried", [failed(0, 0, R.TERMINATED_BY_SERVER)], FAILED),
    Case("001-STEP2-max-duration-never-retried", [failed(0, 0, R.MAX_DURATION_EXCEEDED)], FAILED),
    # Priority 2: master-done.
    Case("001-STEP2-master-done", [job(0, 0, S.DONE), job(0, 1, S.RUNNING)], ALL_DONE, stop_criteria=MASTER),
    Case(
        "001-STEP2-master-exited-0-and-cleaning-up",
        [terminating(0, 0, R.DONE_BY_RUNNER), job(0, 1, S.RUNNING)], ALL_DONE, stop_criteria=MASTER,
    ),
    Case(
        "001-STEP2-master-done-beats-retryable-worker",
        [job(0, 0, S.DONE), failed(0, 1, INTERRUPTED)], ALL_DONE, stop_criteria=MASTER,
    ),
    Case("001-STEP2-all-done-criteria-waits-for-workers", [job(0, 0, S.DONE), job(0, 1, S.RUNNING)], RUNNING),
    Case(
        "001-STEP2-master-done-ignores-done-worker",
        [job(0, 0, S.RUNNING), job(0, 1, S.DONE)], RUNNING, stop_criteria=MASTER,
    ),
    # Priorities 3-5: RUNNING, then PROVISIONING or PULLING, then SUBMITTED.
    Case(
        "000-STEP2-any-running-RUNNING",
        [job(0, 0, S.SUBMITTED), job(0, 1, S.PROVISIONING), job(1, 0, S.RUNNING)], RUNNING,
    ),
    Case("000-STEP2-running-with-some-done-RUNNING", [job(0, 0, S.DONE), job(1, 0, S.RUNNING)], RUNNING),
    Case("000-STEP2-provisioning", [job(0, 0, S.SUBMITTED), job(1, 0, S.PROVISIONING)], PROVISIONING),
    Case("000-STEP2-pulling-is-provisioning", [job(0, 0, S.SUBMITTED), job(0, 1, S.PULLING)], PROVISIONING),
    Case("001-STEP2-waiting-for-placement-SUBMITTED", [job(0, 0, S.SUBMITTED), job(1, 0, S.DONE)], SUBMITTED),
    Case("000-STEP1-new-run-SUBMITTED", [job(0, 0, S.SUBMITTED)], SUBMITTED),
    # Priority 6: every contributing job DONE.
    Case("000-STEP2-all-done-ALL_JOBS_DONE", [job(0, 0, S.DONE), job(0, 1, S.DONE)], ALL_DONE),
    Case("001-STEP2-all-exited-0", [job(0, 0, S.DONE), terminating(1, 0, R.DONE_BY_RUNNER)], ALL_DONE),
    # SCALED_DOWN jobs do not contribute.
    Case("001-STEP2-scaled-down-ignored", [job(0, 0, S.RUNNING), failed(1, 0, R.SCALED_DOWN)], RUNNING),
    Case(
        "001-STEP2-scaled-down-terminating-ignored",
        [job(0, 0, S.DONE), terminating(1, 0, R.SCALED_DOWN)], ALL_DONE, retry=None,
    ),
    Case("001-STEP3-scaled-to-zero-PENDING", [failed(0, 0, R.SCALED_DOWN)], PENDING, retry=None),
    Case("001-STEP2-no-jobs-PENDING", [], PENDING),
    # Retryable replica failures: resubmitted in place while another replica is active, else PENDING.
    Case(
        "001-STEP2-replica-resubmitted-in-place",
        [job(0, 0, S.RUNNING), failed(1, 0, INTERRUPTED, provisioned=990)], RUNNING, resubmit=[1],
    ),
    Case(
        "001-STEP2-status-from-remaining-replicas",
        [failed(0, 0, NO_CAP), job(1, 0, S.PROVISIONING), job(2, 0, S.SUBMITTED)], PROVISIONING, resubmit=[0],
    ),
    Case(
        "001-STEP2-retryable-terminating-job-in-place",
        [terminating(0, 0, R.INSTANCE_UNREACHABLE), job(1, 0, S.SUBMITTED)], SUBMITTED, resubmit=[0],
    ),
    Case(
        "000-STEP2-multi-node-one-node-fails-whole-replica",
        [job(0, 0, S.RUNNING), failed(0, 1, INTERRUPTED), job(1, 0, S.RUNNING), job(1, 1, S.RUNNING)],
        RUNNING, resubmit=[0],
    ),
    Case(
        "000-STEP2-multi-node-single-replica-PENDING",
        [job(0, 0, S.RUNNING), failed(0, 1, INTERRUPTED)], PENDING, resubmit=[0], retry_at=NOW + 15,
    ),
    Case(
        "001-STEP2-all-retryable-PENDING",
        [failed(0, 0, NO_CAP), failed(1, 0, INTERRUPTED)], PENDING, resubmit=[0, 1], retry_at=NOW + 15,
    ),
    Case(
        "001-STEP2-done-replica-is-not-active-PENDING",
        [job(0, 0, S.DONE), failed(1, 0, EXITED)], PENDING, resubmit=[1], retry_at=NOW + 15,
    ),
    Case(
        "001-STEP3-backoff-grows-with-attempt",
        [failed(0, 0, NO_CAP)], PENDING, resubmit=[0], attempt=3, retry_at=NOW + 120,
    ),
    Case(
        "000-STEP2-interruption-window-from-last-provisioning",
        [failed(0, 0, INTERRUPTED, provisioned=3000)], PENDING, resubmit=[0], now=4000.0, retry_at=4015.0,
    ),
    Case(
        "001-STEP5-window-from-scheduled-trigger",
        [failed(0, 0, NO_CAP)], PENDING, resubmit=[0], now=9000.0, run_submitted_at=8000.0, retry_at=9015.0,
    ),
    Case(
        "000-STEP2-window-from-jobs-own-first-submission",
        [job(0, 0, S.RUNNING), failed(1, 0, NO_CAP, first=5000)], RUNNING, resubmit=[1], now=6000.0,
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_derive_run_status(case: Case) -> None:
    decision = derive_run_status(
        case.jobs,
        stop_criteria=case.stop_criteria,
        retry=case.retry,
        now=case.now,
        run_submitted_at=case.run_submitted_at,
        attempt=case.attempt,
    )
    status, reason = case.expect
    expected = RunDecision(
        status=status, termination_reason=reason, replicas_to_resubmit=case.resubmit, retry_at=case.retry_at
    )
    assert decision == expected
    assert decision.resubmit_in_place == (bool(case.resubmit) and status != RS.PENDING)


def test_001_STEP4_jobs_to_stop_are_the_active_siblings_of_resubmitted_replicas() -> None:
    jobs = [
        job(0, 0, S.RUNNING),
        failed(0, 1, INTERRUPTED),
        terminating(0, 2, R.INSTANCE_UNREACHABLE),
        job(1, 0, S.RUNNING),
    ]
    assert jobs_to_stop(jobs, [0]) == [jobs[0]]
    assert jobs_to_stop(jobs, []) == []


@pytest.mark.parametrize(
    ("reason", "verdict", "run_reason"),
    [
        (R.ABORTED_BY_USER, RetryVerdict.NOT_RETRYABLE, RR.ABORTED_BY_USER),
        (R.TERMINATED_BY_USER, RetryVerdict.NOT_RETRYABLE, RR.STOPPED_BY_USER),
        (EXITED, RetryVerdict.NOT_RETRYABLE, RR.JOB_FAILED),
        (EXITED, RetryVerdict.LIMIT_EXCEEDED, RR.RETRY_LIMIT_EXCEEDED),
    ],
)
def test_run_reason_for_job_failure(reason: R, verdict: RetryVerdict, run_reason: RR) -> None:
    assert run_reason_for_job_failure(reason, verdict) == run_reason


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (S.RUNNING, EXITED),
        (S.TERMINATING, None),
        (S.FAILED, None),
        (S.DONE, EXITED),
        (S.FAILED, R.DONE_BY_RUNNER),
    ],
)
def test_job_view_rejects_a_reason_that_disagrees_with_its_status(
    status: JobStatus, reason: R | None
) -> None:
    with pytest.raises(ValidationError):
        JobView(replica_num=0, job_num=0, status=status, termination_reason=reason, first_submitted_at=0)


def _consistent_job(
    replica: int, num: int, status: JobStatus, reason: R, first: float, prov: float | None
) -> JobView:
    if status == S.TERMINATING:
        return terminating(replica, num, reason, first=first, provisioned=prov)
    if status.is_finished():
        return failed(replica, num, reason, first=first, provisioned=prov)
    return job(replica, num, status, first=first, provisioned=prov)


job_views = st.builds(
    _consistent_job,
    st.integers(0, 3),
    st.integers(0, 2),
    st.sampled_from(list(S)),
    st.sampled_from(list(R)),
    st.floats(0, 5000),
    st.none() | st.floats(0, 5000),
)
policies = st.none() | st.builds(
    RetryPolicy,
    on_events=st.lists(st.sampled_from(["no-capacity", "interruption", "error"]), unique=True),
    duration=st.integers(0, 7200),
)


@given(
    jobs=st.lists(job_views, max_size=8, unique_by=lambda j: (j.replica_num, j.job_num)),
    retry=policies,
    stop=st.sampled_from(["all-done", "master-done"]),
    now=st.floats(0, 10_000),
)
def test_derive_run_status_invariants(
    jobs: list[JobView], retry: RetryPolicy | None, stop: StopCriteria, now: float
) -> None:
    decide = derive_run_status
    decision = decide(jobs, stop_criteria=stop, retry=retry, now=now, run_submitted_at=0.0)
    # STEP 2 never assigns a finished status: only the terminating phase does (seed rule).
    assert decision.status.is_active()
    assert (decision.status == RS.TERMINATING) == (decision.termination_reason is not None)
    assert decision.replicas_to_resubmit == sorted(set(decision.replicas_to_resubmit))
    assert set(decision.replicas_to_resubmit) <= {j.replica_num for j in jobs}
    assert (decision.retry_at is not None) == (
        decision.status == RS.PENDING and bool(decision.replicas_to_resubmit)
    )
    if decision.status == RS.TERMINATING:
        assert not decision.replicas_to_resubmit
    # SCALED_DOWN jobs never change the decision.
    scaled = [failed(7, 0, R.SCALED_DOWN), terminating(8, 1, R.SCALED_DOWN)]
    assert (
        decide([*jobs, *scaled], stop_criteria=stop, retry=retry, now=now, run_submitted_at=0.0) == decision
    )
    # The order jobs are listed in does not matter.
    assert decide(jobs[::-1], stop_criteria=stop, retry=retry, now=now, run_submitted_at=0.0) == decision
