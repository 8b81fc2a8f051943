"""STEP 3, a PENDING run (docs/runs.md#step-3-pending): it waits out a backoff, then resubmits.

A run goes PENDING when all its remaining work failed retryably (`core.runs.active`). Its failed
replicas' still-running jobs stop at once: a node still running after another failed would hold its
instance through the backoff and beyond. Once `retry_at` has passed (a durable timer in the workflow),
every failed replica gets a new submission and the run is SUBMITTED again.
"""

from __future__ import annotations

from core.runs.derivation import RunDecision
from core.runs.machine import StepBuilder
from core.runs.retry import pending_backoff
from core.runs.state_machine import RunState
from core.runs.status_decision import derive
from core.status import JobStatus, JobTerminationReason, RunStatus


def enter(b: StepBuilder, decision: RunDecision) -> None:
    """The run becomes PENDING (the caller logs the status): when to resubmit, and what to stop now."""
    if not decision.replicas_to_resubmit:
        b.retry_at = None  # scaled to zero: a request wakes it (core.runs.scaling), no backoff to wait out
        return
    b.retry_at = decision.retry_at or b.now + pending_backoff(b.state.retries)
    for replica in decision.replicas_to_resubmit:
        b.stop_replica(replica)


def retry_due(b: StepBuilder) -> bool:
    return b.retry_at is not None and b.now >= b.retry_at


def resubmit_all(b: StepBuilder) -> None:
    """The backoff is over: every failed replica gets a new submission; of an array, only the elements
    that failed retryably (the others failed for good: core.runs.arrays)."""
    state = b.state
    replicas = replicas_to_resubmit(state)
    if b.plan.array:
        decision = derive(b)
        replicas = [replica for replica in replicas if replica in decision.replicas_to_resubmit]
        if not replicas:  # each failed element is past its retry window now: the run ends with them
            b.retry_at = None
            b.log("status", status=decision.status, reason=decision.termination_reason)
            return
    b.log("retry", replicas=replicas, attempt=state.retries, backoff=pending_backoff(state.retries))
    for replica in replicas:
        b.submit_replica(replica)
    b.retry_at = None
    b.log("status", status=RunStatus.SUBMITTED)


def replicas_to_resubmit(state: RunState) -> list[int]:
    """The replicas a PENDING run resubmits once its backoff is over, those whose latest jobs failed
    (finished, or still cleaning up if that took longer than the backoff)."""
    return sorted(
        {
            job.replica_num
            for job in state.jobs
            if job.termination_reason is not None
            and job.termination_reason != JobTerminationReason.SCALED_DOWN
            and job.termination_reason.to_status() != JobStatus.DONE
        }
    )
