"""`startup_order`: which nodes of a multi-node replica wait for others to run before they start
(docs/runs.md#startup-order), as dstack orders them.

`master-first`: the workers (jobs 1..) start once the master (job 0) runs. `workers-first`: the master
starts once every worker runs. `any`: each starts as soon as it is placed. A waiting job is placed and its
task prepared, then holds PROVISIONING until its run tells it (`PeersStarted`) that the jobs it waits for
have started; the run tells it when the last of them is heard RUNNING.
"""

from __future__ import annotations

from core.configuration.fields import StartupOrder
from core.runs.effects import PeersStarted
from core.runs.state_machine import RunState
from core.status import JobStatus

# A job that has run counts as started, even if it has ended since (a master that is quickly done).
_STARTED = frozenset({JobStatus.RUNNING, JobStatus.TERMINATING, JobStatus.DONE})


def waits_for(order: StartupOrder | str, job_num: int, nodes: int) -> list[int]:
    """The jobs of its replica that `job_num` waits for, by the order alone."""
    if nodes < 2:
        return []
    if order == StartupOrder.MASTER_FIRST and job_num > 0:
        return [0]
    if order == StartupOrder.WORKERS_FIRST and job_num == 0:
        return list(range(1, nodes))
    return []


def still_waits_for(
    order: StartupOrder | str, state: RunState, replica: int, job_num: int, nodes: int
) -> list[int]:
    """What a submission starting now waits for: the jobs it waits for that have not started yet."""
    return [n for n in waits_for(order, job_num, nodes) if not started(state, replica, n)]


def releases(
    order: StartupOrder | str, state: RunState, replica: int, job_started: int, nodes: int
) -> list[PeersStarted]:
    """Job `job_started` of `replica` was just heard to start: the jobs now free to start, those that
    waited for it and for nothing else still to start."""
    found = []
    for job_num in range(nodes):
        current = state.job(replica, job_num)
        prerequisites = waits_for(order, job_num, nodes)
        if current is None or job_started not in prerequisites or current.status not in _WAITING:
            continue
        if all(started(state, replica, n) for n in prerequisites):
            found.append(
                PeersStarted(replica_num=replica, job_num=job_num, submission_num=current.submission_num)
            )
    return found


_WAITING = frozenset({JobStatus.SUBMITTED, JobStatus.PROVISIONING})


def started(state: RunState, replica: int, job_num: int) -> bool:
    """The latest submission of (replica, job_num) has run (it may have ended since)."""
    current = state.job(replica, job_num)
    return current is not None and current.status in _STARTED
