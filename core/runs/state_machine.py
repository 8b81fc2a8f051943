"""A run's eventlog and its replay: the run's status, its jobs' latest submissions, its retries.

`RunWorkflow` logs one event per change it decides or hears of; `replay_run` (the fold of
`apply_run_event`) rebuilds the same state, and `RunState.job_views()` feeds `derive_run_status` again.
The job machine and the event format are in `core.eventlog`.

Run events (status after; '=' unchanged):

| event                                   | legal in                          | status after              |
|-----------------------------------------|-----------------------------------|---------------------------|
| submit {run_name, project, user, type}  | first event only                  | SUBMITTED                 |
| status {status, reason?}                | any active but TERMINATING        | status (not finished)     |
| status {TERMINATING, reason}            | any active                        | TERMINATING, latest reason|
| status {PENDING}                        | TERMINATING: all jobs finished,   | PENDING (scheduled runs,  |
|                                         | not stopped/aborted by the user   | STEP 5)                   |
| job-submit {replica, job, submission,   | any active but TERMINATING        | =                         |
|   deployment?, group?}                  |                                   |                           |
| job-status {replica, job, submission,   | any active                        | =                         |
|   status, reason?}                      |                                   |                           |
| job-finish {replica, job, submission,   | any active                        | =                         |
|   status, reason, exit_status?,         |                                   |                           |
|   provisioned?}                         |                                   |                           |
| retry {replicas, attempt, backoff}      | any active but TERMINATING        | =                         |
| scale {replicas, rps, group?}           | any active but TERMINATING        | =                         |
| deploy {deployment, changed}            | any active but TERMINATING        | =                         |
| job-serving {replica, job, submission,  | any active                        | =                         |
|   state}                                |                                   |                           |
| schedule-wait {next_at}                 | PENDING (a scheduled run)         | =                         |
| cycle {cycle, workflow_id, scheduled_at}| PENDING, once per trigger         | SUBMITTED                 |
| cycle-skip {workflow_id, scheduled_at}  | any active                        | =                         |
| cycle-end {cycle, status, reason}       | TERMINATING, all jobs finished    | = (PENDING follows)       |
| dependency-add {description, run,       | any active but TERMINATING        | =                         |
|   condition, run_id?}                   |                                   |                           |
| dependency-remove {description}         | any active but TERMINATING        | =                         |
| depend                                  | PENDING, every dependency removed | =                         |
| task-start {task, of, run_id}           | any active but TERMINATING        | = (a pipeline's task)     |
| task-end {task, status, reason?}        | any active                        | =                         |
| exception {type, severity, note?}       | any active                        | = (recorded only)         |
| priority {priority}, memo, debug.*      | any active                        | =                         |
| clean {status, reason}                  | TERMINATING, all jobs finished    | reason.to_status()        |

A TERMINATING status needs a reason and no other status takes one. Job submissions of one (replica,
job) are numbered 0, 1, 2...; job-status and job-finish about an older submission (a sibling stopped
after its replica was resubmitted) are accepted and change nothing. For the latest one, statuses only
move forward (SUBMITTED, PROVISIONING, PULLING, RUNNING, TERMINATING, then finished), a finished
status is the one its reason leads to, and a TERMINATING reason is kept by job-finish.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Any

from core.configuration.specs import DependencyCondition
from core.eventlog import (
    Event,
    EventlogError,
    check_event,
    check_final,
    exception_record,
    fold,
    maybe,
    memo_update,
    need,
    need_index,
)
from core.runs.run_state import RunJob, RunState, job_key
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason

__all__ = ["RunJob", "RunState", "apply_run_event", "replay_run"]

_ACTIVE_RUN = frozenset(s for s in RunStatus if s.is_active())
_NOT_TERMINATING = _ACTIVE_RUN - {RunStatus.TERMINATING}

RUN_EVENTS_FROM: dict[str, frozenset[RunStatus]] = {
    "submit": frozenset(),
    "status": _ACTIVE_RUN,
    "job-submit": _NOT_TERMINATING,
    "job-status": _ACTIVE_RUN,
    "job-finish": _ACTIVE_RUN,
    "retry": _NOT_TERMINATING,
    "scale": _NOT_TERMINATING,
    "deploy": _NOT_TERMINATING,
    "job-serving": _ACTIVE_RUN,
    "schedule-wait": frozenset({RunStatus.PENDING}),
    "cycle": frozenset({RunStatus.PENDING}),
    "cycle-skip": _ACTIVE_RUN,
    "cycle-end": frozenset({RunStatus.TERMINATING}),
    "dependency-add": _NOT_TERMINATING,
    "dependency-remove": _NOT_TERMINATING,
    "depend": frozenset({RunStatus.PENDING}),
    "task-start": _NOT_TERMINATING,
    "task-end": _ACTIVE_RUN,
    "exception": _ACTIVE_RUN,
    "priority": _ACTIVE_RUN,
    "memo": _ACTIVE_RUN,
    "clean": frozenset({RunStatus.TERMINATING}),
}

# The order a job submission's statuses may move in, as the run hears of them.
JOB_STATUS_RANK = {
    s: n
    for n, s in enumerate(
        [
            JobStatus.SUBMITTED,
            JobStatus.PROVISIONING,
            JobStatus.PULLING,
            JobStatus.RUNNING,
            JobStatus.TERMINATING,
        ]
    )
}
_HOLDING_INSTANCE = frozenset({JobStatus.PROVISIONING, JobStatus.PULLING, JobStatus.RUNNING})


def _with_job(state: RunState, job: RunJob) -> RunState:
    """The job put in its place among the sorted jobs, replacing the one with its key (bisection: an
    array's thousand elements change at every news)."""
    jobs, key = state.jobs, job_key(job)
    at = bisect.bisect_left(jobs, key, key=job_key)
    after = at + 1 if at < len(jobs) and job_key(jobs[at]) == key else at
    return state.model_copy(update={"jobs": (*jobs[:at], job, *jobs[after:])})


def _all_jobs_finished(state: RunState) -> bool:
    return all(j.status.is_finished() for j in state.jobs)


def _run_status(state: RunState, event: Event) -> RunState:
    status = need(event, "status", RunStatus)
    reason = maybe(event, "reason", RunTerminationReason)
    if status.is_finished():
        raise EventlogError(f"a run becomes {status} only by clean")
    if (status == RunStatus.TERMINATING) != (reason is not None):
        raise EventlogError("a TERMINATING status needs a reason, and no other status takes one")
    rearm = (
        status == RunStatus.PENDING
        and _all_jobs_finished(state)
        and not (state.termination_reason is not None and state.termination_reason.is_by_user)
    )
    if state.status == RunStatus.TERMINATING and status != RunStatus.TERMINATING and not rearm:
        raise EventlogError(f"a terminating run goes only back to PENDING (a scheduled run), not to {status}")
    times = state.times if status in state.times else {**state.times, status: event.timestamp}
    since = state.status_since if status == state.status else event.timestamp
    update = {"status": status, "termination_reason": reason, "times": times, "status_since": since}
    return state.model_copy(update=update)


def _job_submit(state: RunState, event: Event) -> RunState:
    replica, job, submission = (need_index(event, k) for k in ("replica", "job", "submission"))
    current = state.job(replica, job)
    expected = 0 if current is None else current.submission_num + 1
    if submission != expected:
        raise EventlogError(f"replica {replica} job {job}: submission {submission}, expected {expected}")
    # A new cycle of a scheduled run starts its jobs' retry clocks anew.
    new_cycle = (
        current is not None
        and state.cycle_started_at is not None
        and current.submitted_at < state.cycle_started_at
    )
    first = event.timestamp if current is None or new_cycle else current.first_submitted_at
    last = None if current is None else current.last_provisioned_at
    if current is not None:
        state = state.after_submission(current, event.timestamp, new_cycle=new_cycle)
    deployment = maybe(event, "deployment", int) or 0
    if not 0 <= deployment <= state.deployment:
        raise EventlogError(f"deployment {deployment} is not one of the run's (0..{state.deployment})")
    new = RunJob(
        group=maybe(event, "group", str),
        deployment=deployment,
        replica_num=replica,
        job_num=job,
        submission_num=submission,
        first_submitted_at=first,
        submitted_at=event.timestamp,
        last_provisioned_at=last,
    )
    return _with_job(state, new).model_copy(update={"submissions": state.submissions + 1})


def _latest(state: RunState, event: Event) -> RunJob | None:
    """The job an event is about if it is about its latest submission; None for an older one."""
    replica, job, submission = (need_index(event, k) for k in ("replica", "job", "submission"))
    current = state.job(replica, job)
    if current is None or submission > current.submission_num:
        raise EventlogError(f"replica {replica} job {job} submission {submission} was never submitted")
    if submission < current.submission_num:
        return None
    if current.status.is_finished():
        raise EventlogError(f"replica {replica} job {job} submission {submission} has already finished")
    return current


def _name(job: RunJob) -> str:
    return f"replica {job.replica_num} job {job.job_num} submission {job.submission_num}"


def _said(status: JobStatus, reason: JobTerminationReason | None) -> str:
    return f"{status} ({reason})" if reason else str(status)


def _job_status(state: RunState, event: Event) -> RunState:
    status = need(event, "status", JobStatus)
    reason = maybe(event, "reason", JobTerminationReason)
    if status not in JOB_STATUS_RANK:
        raise EventlogError(f"job-status cannot be {status}: a job finishes by job-finish")
    if (status == JobStatus.TERMINATING) != (reason is not None):
        raise EventlogError("a TERMINATING job needs a reason, and no other status takes one")
    job = _latest(state, event)
    if job is None:
        return state
    if JOB_STATUS_RANK[status] < JOB_STATUS_RANK[job.status] or (
        status == job.status and reason != job.termination_reason
    ):
        raise EventlogError(
            f"{_name(job)} goes from {_said(job.status, job.termination_reason)} to {_said(status, reason)}"
        )
    provisioned = job.provisioned or status in _HOLDING_INSTANCE
    update: dict[str, Any] = {"status": status, "termination_reason": reason, "provisioned": provisioned}
    if provisioned:
        update["last_provisioned_at"] = event.timestamp
    if status == JobStatus.RUNNING and job.running_at is None:
        update["running_at"] = event.timestamp
    return _with_job(state, job.model_copy(update=update))


def _job_finish(state: RunState, event: Event) -> RunState:
    status = need(event, "status", JobStatus)
    reason = need(event, "reason", JobTerminationReason)
    exit_status = maybe(event, "exit_status", int)
    job = _latest(state, event)
    if job is None:
        check_final(status, reason, reason)
        return state
    check_final(status, reason, job.termination_reason or reason)
    provisioned = job.provisioned or bool(maybe(event, "provisioned", bool))
    update: dict[str, Any] = {"status": status, "termination_reason": reason, "exit_status": exit_status}
    if provisioned:
        update |= {"provisioned": True, "last_provisioned_at": event.timestamp}
    return _with_job(state, job.model_copy(update=update))


def _retry(state: RunState, event: Event) -> RunState:
    replicas = need(event, "replicas", list)
    known = {j.replica_num for j in state.jobs}
    # An empty list is allowed: a pending run may come back with nothing to resubmit (scaled to zero).
    if not all(isinstance(r, int) and not isinstance(r, bool) and r in known for r in replicas):
        raise EventlogError(f"retry needs a list of the run's replicas, got {replicas!r}")
    attempt = need_index(event, "attempt")
    need_index(event, "backoff")
    return state.model_copy(update={"retries": state.retries + 1, "retry_attempt": attempt})


def _deploy(state: RunState, event: Event) -> RunState:
    deployment = need_index(event, "deployment")
    if deployment != state.deployment + 1:
        raise EventlogError(f"deployment {deployment}, expected {state.deployment + 1}")
    need(event, "changed", list)
    return state.model_copy(update={"deployment": deployment})


def _job_serving(state: RunState, event: Event) -> RunState:
    serving = need(event, "state", str)
    job = _latest(state, event)
    if job is None:
        return state
    return _with_job(state, job.model_copy(update={"serving": serving}))


def _scale(state: RunState, event: Event) -> RunState:
    replicas = need_index(event, "replicas")
    need(event, "rps", float)
    group = maybe(event, "group", str)
    if group is None:
        return state.model_copy(update={"replicas": replicas, "scaled_at": event.timestamp})
    counts = {**state.group_replicas, group: replicas}
    times = {**state.group_scaled_at, group: event.timestamp}
    return state.model_copy(update={"group_replicas": counts, "group_scaled_at": times})


def _cycle(state: RunState, event: Event) -> RunState:
    cycle = need_index(event, "cycle")
    if cycle != state.cycle + 1:
        raise EventlogError(f"cycle {cycle}, expected {state.cycle + 1}")
    need(event, "scheduled_at", float)
    update = {
        "cycle": cycle,
        "cycle_started_at": event.timestamp,
        "cycle_workflow_id": need(event, "workflow_id", str),
        "next_at": None,
        "retries": 0,
        "retry_attempt": None,
        "status": RunStatus.SUBMITTED,
        "status_since": event.timestamp,
    }
    return state.model_copy(update=update)


def _cycle_end(state: RunState, event: Event) -> RunState:
    if need_index(event, "cycle") != state.cycle:
        raise EventlogError(f"cycle-end of cycle {event.context.get('cycle')}, the current is {state.cycle}")
    status = need(event, "status", RunStatus)
    check_final(status, need(event, "reason", RunTerminationReason), state.termination_reason)
    if not _all_jobs_finished(state):
        raise EventlogError("cycle-end while some jobs are still active")
    return state.model_copy(update={"last_cycle": status.value, "cycle_workflow_id": None})


def _dependency_add(state: RunState, event: Event) -> RunState:
    description = need(event, "description", str)
    need(event, "run", str)
    need(event, "condition", DependencyCondition)
    if description in state.waiting_for:
        raise EventlogError(f"dependency {description} is already there")
    return state.model_copy(update={"waiting_for": (*state.waiting_for, description)})


def _dependency_remove(state: RunState, event: Event) -> RunState:
    description = need(event, "description", str)
    if description not in state.waiting_for:
        raise EventlogError(f"dependency-remove of {description}, which was never added (or already removed)")
    return state.model_copy(update={"waiting_for": tuple(d for d in state.waiting_for if d != description)})


def _depend(state: RunState, event: Event) -> RunState:
    if state.waiting_for:
        raise EventlogError(f"depend while still waiting for {', '.join(state.waiting_for)}")
    return state


def _task_start(state: RunState, event: Event) -> RunState:
    task = need_index(event, "task")
    tasks = need_index(event, "of")
    if task != state.task + 1 or task > tasks or (state.tasks and tasks != state.tasks):
        raise EventlogError(f"task-start of task {task} of {tasks}, after task {state.task} of {state.tasks}")
    return state.model_copy(update={"task": task, "tasks": tasks, "task_run_id": need(event, "run_id", str)})


def _task_end(state: RunState, event: Event) -> RunState:
    if need_index(event, "task") != state.task or state.task == 0:
        raise EventlogError(f"task-end of task {event.context.get('task')}, the running one is {state.task}")
    status = need(event, "status", RunStatus)
    if not status.is_finished():
        raise EventlogError(f"task-end with an active status {status}")
    maybe(event, "reason", RunTerminationReason)
    return state


def _clean(state: RunState, event: Event) -> RunState:
    status = need(event, "status", RunStatus)
    check_final(status, need(event, "reason", RunTerminationReason), state.termination_reason)
    if not _all_jobs_finished(state):
        raise EventlogError("clean while some jobs are still active")
    times = {**state.times, status: event.timestamp}
    return state.model_copy(update={"status": status, "times": times, "status_since": event.timestamp})


def _exception(state: RunState, event: Event) -> RunState:
    # A run's exceptions are recorded only: its status changes by `status` events, decided by the workflow.
    return state.model_copy(update={"exceptions": (*state.exceptions, exception_record(event))})


_RUN_HANDLERS: dict[str, Callable[[RunState, Event], RunState]] = {
    "status": _run_status,
    "job-submit": _job_submit,
    "job-status": _job_status,
    "job-finish": _job_finish,
    "retry": _retry,
    "scale": _scale,
    "deploy": _deploy,
    "job-serving": _job_serving,
    "schedule-wait": lambda state, event: state.model_copy(update={"next_at": need(event, "next_at", float)}),
    "cycle": _cycle,
    "cycle-skip": lambda state, event: state.model_copy(update={"cycles_skipped": state.cycles_skipped + 1}),
    "cycle-end": _cycle_end,
    "dependency-add": _dependency_add,
    "dependency-remove": _dependency_remove,
    "depend": _depend,
    "task-start": _task_start,
    "task-end": _task_end,
    "exception": _exception,
    "priority": lambda state, event: state.model_copy(update={"priority": need_index(event, "priority")}),
    "memo": lambda state, event: state.model_copy(update={"memo": memo_update(state.memo, event)}),
    "clean": _clean,
}


def apply_run_event(state: RunState | None, event: Event) -> RunState:
    """The run state after `event` (`state` None: the log so far is empty). Never mutates `state`."""
    if state is None:
        check_event(None, event, RUN_EVENTS_FROM, False)
        return RunState(
            run_name=need(event, "run_name", str),
            project=need(event, "project", str),
            user=need(event, "user", str),
            run_type=need(event, "type", str),
            status=RunStatus.SUBMITTED,
            times={RunStatus.SUBMITTED: event.timestamp},
            status_since=event.timestamp,
        )
    if not check_event(state.status, event, RUN_EVENTS_FROM, state.status.is_finished()):
        return state
    return _RUN_HANDLERS[event.name](state, event)


def replay_run(events: Iterable[Event]) -> RunState:
    """The state a run's eventlog leads to."""
    return fold(apply_run_event, events)
