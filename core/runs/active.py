"""STEP 2, an active run (docs/runs.md#step-2-active): its status derived from its jobs, in priority order.

`core.runs.derivation.derive_run_status` gives the status; this phase acts on it: a replica that failed
retryably while another is active is resubmitted in place at once (its still-running jobs are stopped
first); a run whose remaining work is all retryable goes PENDING (`core.runs.pending`); a non-retryable
failure or the end of the work makes it TERMINATING (`core.runs.terminating`).
"""

from __future__ import annotations

from core.runs import arrays, pending
from core.runs.machine import StepBuilder
from core.runs.status_decision import derive
from core.status import RunStatus


def applies(b: StepBuilder) -> bool:
    return b.state.status not in (RunStatus.TERMINATING, RunStatus.PENDING) and b.state.status.is_active()


def decide(b: StepBuilder) -> None:
    state = b.state
    decision = derive(b)
    if decision.resubmit_in_place:
        # Another replica is still active, so the failed ones start again at once. A PENDING decision
        # resubmits nothing yet: `pending.resubmit_all` does once the backoff is over.
        b.log("retry", replicas=decision.replicas_to_resubmit, attempt=state.retries, backoff=0)
        for replica in decision.replicas_to_resubmit:
            b.stop_replica(replica)
            b.submit_replica(replica)
    arrays.fill(b)  # after the resubmissions, which count among the elements active
    if decision.status == RunStatus.PENDING:
        pending.enter(b, decision)
    if decision.status != state.status:
        b.log("status", status=decision.status, reason=decision.termination_reason)
