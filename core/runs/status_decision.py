"""STEP 2's decision for a run as it is now: `core.runs.derivation.derive_run_status` over its jobs, with
what the run's plan and clock add. `core.runs.active` acts on it; `core.runs.pending` asks it again once a
backoff is over, for an array, whose failed elements are not all to be resubmitted."""

from __future__ import annotations

from core.runs import arrays
from core.runs.derivation import RunDecision, derive_run_status
from core.runs.machine import StepBuilder


def derive(b: StepBuilder) -> RunDecision:
    state = b.state
    return derive_run_status(
        state.job_views(),
        stop_criteria=b.plan.stop_criteria,
        retry=b.plan.retry,
        now=b.now,
        run_submitted_at=b.plan.submitted_at,
        attempt=state.retries,
        retry_window_restarts=b.retry_window_restarts,
        array=b.plan.array > 0,
        elements_left=arrays.unstarted(b.plan, state),
    )
