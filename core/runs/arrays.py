"""An array task's elements (docs/runs.md#arrays): element i is replica i of the run, one job, started in
order and at most `max_parallel` at a time. Each element is a job like any other: its own submissions,
retries (the run's `retry`, element by element), log and eventlog. An element that fails for good does not
stop the others, as in Slurm's arrays; the run ends once every element has, FAILED if any failed.
"""

from __future__ import annotations

from core.configuration import TaskConfiguration
from core.runs.machine import RunPlan, StepBuilder
from core.runs.state_machine import RunState
from core.wire.job_messages import JobInput, JobUpdate
from core.wire.volumes import named_volumes


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


def share_one_workflow(first: JobInput) -> bool:
    """Whether an array's elements can run in one ElementsWorkflow (workflows/elements.py), going by its first
    element: not with named volumes to attach, nor a utilization policy to watch (their JobWorkflow's steps
    that it does not take); such an array keeps a JobWorkflow per element."""
    return not named_volumes(first.volumes) and first.utilization_policy is None


def unheard(updates: list[JobUpdate], heard: dict[str, int]) -> list[JobUpdate]:
    """The elements' news not heard before: an update whose events the run has heard is dropped, one that
    repeats some of them keeps the rest. `heard` (by job submission id: how many events) is kept current."""
    kept = []
    for update in updates:
        record = update.record
        job_id, end = record.job_submission_id, record.start_seq + len(record.events)
        before = heard.get(job_id, 0)
        if end <= before:
            continue
        heard[job_id] = end
        if record.start_seq < before:
            events = record.events[before - record.start_seq :]
            record = record.model_copy(update={"start_seq": before, "events": events})
            update = update.model_copy(update={"record": record})
        kept.append(update)
    return kept


def max_parallel(configuration: object) -> int:
    """How many of an array's elements may be active at once (all of them by default)."""
    array = configuration.array if isinstance(configuration, TaskConfiguration) else None
    return 0 if array is None else array.parallel()


# An array's elements go to up to this many ElementsWorkflows (shards), each with its share of max_parallel:
# each workflow carries out its steps one after another, so shards work side by side
# (docs/scaling.md#arrays). At least this many elements at once per shard.
MAX_SHARDS = 4
_PER_SHARD = 16


def shard_count(max_parallel: int) -> int:
    return max(1, min(MAX_SHARDS, max_parallel // _PER_SHARD))


def shard_of(replica_num: int, shards: int) -> int:
    """Element i's shard: i modulo the shards, so that each shard has its share of the elements in order."""
    return replica_num % shards


def shard_parallel(max_parallel: int, shards: int, shard: int) -> int:
    """A shard's share of `max_parallel`: the shares add up to it."""
    return max_parallel // shards + (1 if shard < max_parallel % shards else 0)
