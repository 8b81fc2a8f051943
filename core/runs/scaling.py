"""A service's replica count (docs/services.md#autoscaling): the autoscaler's answer carried out.

The load watch (activities.services.watch_load) says when `core.services.autoscaler` wants another count;
this phase logs it (`scale`) and submits new replicas or stops surplus ones. A service with replica groups
scales each group on its own (docs/services.md#replica-groups): every rule here is about one group, None
for a service without groups. A surplus replica's jobs
end SCALED_DOWN and no longer count towards the run's status (docs/runs.md STEP 2); a service scaled to
zero goes PENDING (STEP 3) until a request wakes it. Stopped replicas are the newest first: the oldest
have been ready longest.
"""

from __future__ import annotations

from core.runs.machine import StepBuilder
from core.runs.state_machine import RunState
from core.status import JobStatus, JobTerminationReason, RunStatus

SCALED_DOWN = JobTerminationReason.SCALED_DOWN


def current_replicas(b: StepBuilder, group: str | None = None) -> int:
    """The count the run keeps now (of `group`): the autoscaler's latest, else the one it started with."""
    scaled = b.state.scaled_count(group)
    return scaled if scaled is not None else b.plan.starting_count(group)


# The statuses in which a run's replica count follows its load.
SCALES_IN = frozenset({RunStatus.SUBMITTED, RunStatus.PROVISIONING, RunStatus.RUNNING, RunStatus.PENDING})


def applies(b: StepBuilder, group: str | None = None) -> bool:
    """A service that waits for other runs is not woken by its load (docs/dependencies.md)."""
    return b.plan.scaling_rule(group) is not None and b.state.status in SCALES_IN and not b.state.waiting_for


def rescale(b: StepBuilder, desired: int, rps: float, group: str | None = None) -> None:
    """Log the new count (of `group`); start or stop replicas to reach it; wake a run scaled to zero."""
    if desired == current_replicas(b, group):
        return  # an answer about a count the run no longer keeps (it changed meanwhile)
    told = b.told_keys()
    live = serving_replicas(b.state, told, group)
    b.log("scale", replicas=desired, rps=float(rps), group=group)
    if desired > len(live):
        every_group = serving_replicas(b.state, told, group, every_group=True)
        for replica in free_replica_numbers(b.state, every_group, desired - len(live)):
            b.submit_replica(replica, group)
    for replica in sorted(live, reverse=True)[: max(len(live) - desired, 0)]:
        for job in b.state.jobs:
            if job.replica_num == replica and job.status.is_active() and job.status != JobStatus.TERMINATING:
                b.tell_once((job.replica_num, job.job_num, job.submission_num), SCALED_DOWN, abort=False)
    if b.state.status == RunStatus.PENDING and desired > 0:
        b.retry_at = None
        b.log("status", status=RunStatus.SUBMITTED)


def serving_replicas(
    state: RunState, told: set[tuple[int, int, int]], group: str | None = None, every_group: bool = False
) -> list[int]:
    """Replicas (of `group`, or of every group) that serve or are on their way to: their latest jobs
    active and not told to stop."""
    live: set[int] = set()
    stopping: set[int] = set()
    for job in state.jobs:
        if not job.status.is_active() or job.status == JobStatus.TERMINATING:
            continue
        if not every_group and job.group != group:
            continue
        if (job.replica_num, job.job_num, job.submission_num) in told:
            stopping.add(job.replica_num)
        else:
            live.add(job.replica_num)
    return sorted(live - stopping)


def free_replica_numbers(state: RunState, live: list[int], count: int) -> list[int]:
    """`count` replica numbers for new replicas: those whose jobs have all finished first, then new ones."""
    busy = set(live) | {j.replica_num for j in state.jobs if not j.status.is_finished()}
    known = sorted({j.replica_num for j in state.jobs})
    reusable = [r for r in known if r not in busy]
    fresh = range(max(known, default=-1) + 1, max(known, default=-1) + 1 + count)
    return [*reusable, *fresh][:count]
