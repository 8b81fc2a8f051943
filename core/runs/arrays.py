"""An array task's elements (docs/runs.md#arrays): element i is replica i of the run, one job, started in
order and at most `max_parallel` at a time. Each element is a job like any other: its own submissions,
retries (the run's `retry`, element by element), log and eventlog. An element that fails for good does not
stop the others, as in Slurm's arrays; the run ends once every element has, FAILED if any failed.
"""

from __future__ import annotations

from core.runs.machine import RunPlan, StepBuilder
from core.runs.state_machine import RunState


def unstarted(plan: RunPlan, state: RunState) -> int:
    """The elements not submitted yet (0 for a run that is not an array)."""
    if not plan.array:
        return 0
    return plan.array - len({job.replica_num for job in state.jobs})


def fill(b: StepBuilder) -> None:
    """Start the next elements, in order, while fewer than `max_parallel` are active; none once the run is
    asked to stop."""
    left = unstarted(b.plan, b.state)
    if not left or b.stop is not None:
        return
    active = sum(1 for job in b.state.jobs if job.status.is_active())
    first = b.plan.array - left  # elements are started in order: 0..first-1 have been
    for element in range(first, first + min(left, max(b.plan.max_parallel - active, 0))):
        b.submit_replica(element)
