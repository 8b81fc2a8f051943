"""The job's state machine (Flux RFC 21): one job submission's eventlog and its replay (docs/eventlog.md).

`apply_job_event` is one step of the machine and never mutates its input; `replay_job` is the fold of
it over a log. JobWorkflow logs every change as an event and folds it here, so replaying the stored log
gives the job's state. The table says where each event is legal (`JOB_EVENTS_FROM` holds it; a test
checks that docs/eventlog.md shows the same); the guards noted beside it keep a log self-consistent.

Job events (status after; '=' unchanged):

| event             | legal in                                  | status after                            |
|-------------------|-------------------------------------------|-----------------------------------------|
| submit            | first event only                          | SUBMITTED                               |
| validate          | SUBMITTED, once, not after invalidate     | =                                       |
| invalidate        | SUBMITTED, not after validate             | TERMINATING (reason, default by server) |
| dependency-add    | SUBMITTED, before depend, new description | =                                       |
| dependency-remove | SUBMITTED, a description added earlier    | =                                       |
| depend            | SUBMITTED, once, no dependency left       | =                                       |
| priority          | SUBMITTED                                 | =                                       |
| alloc             | SUBMITTED, no dependency left             | PROVISIONING                            |
| pull              | PROVISIONING                              | PULLING                                 |
| start             | PROVISIONING, PULLING                     | RUNNING                                 |
| finish            | RUNNING; TERMINATING if started, once     | TERMINATING                             |
| exception sev 0   | any active                                | TERMINATING (first reason wins)         |
| exception sev 1-7 | any active                                | =                                       |
| release           | TERMINATING, allocated, before free/final | =                                       |
| free              | TERMINATING, allocated, once              | =                                       |
| clean             | TERMINATING                               | reason.to_status() (must equal status)  |
| memo, debug.*     | any active                                | =                                       |

Nothing is legal after clean.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.eventlog import (
    Event,
    ExceptionRecord,
    check_event,
    check_final,
    exception_record,
    fold,
    guard,
    maybe,
    memo_update,
    need,
    need_index,
)
from core.status import JobStatus, JobTerminationReason

_ACTIVE_JOB = frozenset(s for s in JobStatus if s.is_active())


_J = JobStatus


JOB_EVENTS_FROM: dict[str, frozenset[JobStatus]] = {
    "submit": frozenset(),
    "validate": frozenset({_J.SUBMITTED}),
    "invalidate": frozenset({_J.SUBMITTED}),
    "dependency-add": frozenset({_J.SUBMITTED}),
    "dependency-remove": frozenset({_J.SUBMITTED}),
    "depend": frozenset({_J.SUBMITTED}),
    "priority": frozenset({_J.SUBMITTED}),
    "alloc": frozenset({_J.SUBMITTED}),
    "pull": frozenset({_J.PROVISIONING}),
    "start": frozenset({_J.PROVISIONING, _J.PULLING}),
    "finish": frozenset({_J.RUNNING, _J.TERMINATING}),
    "exception": _ACTIVE_JOB,
    "release": frozenset({_J.TERMINATING}),
    "free": frozenset({_J.TERMINATING}),
    "clean": frozenset({_J.TERMINATING}),
    "memo": _ACTIVE_JOB,
}


class JobState(BaseModel):
    """What a job submission's eventlog says about it."""

    model_config = ConfigDict(frozen=True)

    replica_num: int
    job_num: int
    submission_num: int
    status: JobStatus
    termination_reason: JobTerminationReason | None = None
    exit_status: int | None = None
    times: dict[JobStatus, float] = Field(default_factory=dict)  # first time each status was entered
    exceptions: tuple[ExceptionRecord, ...] = ()
    memo: dict[str, Any] = Field(default_factory=dict)
    instance: str | None = None
    priority: int | None = None
    validated: bool = False
    dependencies: tuple[str, ...] = ()  # added and not yet removed
    depended: bool = False
    released: bool = False  # a `release` with final=true was logged
    freed: bool = False

    @property
    def allocated(self) -> bool:
        return JobStatus.PROVISIONING in self.times


def _enter(state: JobState, status: JobStatus, at: float, **updates: Any) -> JobState:
    times = state.times if status in state.times else {**state.times, status: at}
    return state.model_copy(update={"status": status, "times": times, **updates})


def _terminate(state: JobState, reason: JobTerminationReason, at: float, **updates: Any) -> JobState:
    if state.status == JobStatus.TERMINATING:
        return state.model_copy(update=updates)  # the reason that started the termination stays
    return _enter(state, JobStatus.TERMINATING, at, termination_reason=reason, **updates)


def _job_validate(state: JobState, event: Event) -> JobState:
    guard(not state.validated, "validate logged twice")
    return state.model_copy(update={"validated": True})


def _job_invalidate(state: JobState, event: Event) -> JobState:
    guard(not state.validated, "invalidate after validate")
    reason = maybe(event, "reason", JobTerminationReason) or JobTerminationReason.TERMINATED_BY_SERVER
    return _terminate(state, reason, event.timestamp)


def _job_dependency_add(state: JobState, event: Event) -> JobState:
    description = need(event, "description", str)
    guard(not state.depended, "dependency-add after depend")
    guard(description not in state.dependencies, f"dependency {description!r} added twice")
    return state.model_copy(update={"dependencies": (*state.dependencies, description)})


def _job_dependency_remove(state: JobState, event: Event) -> JobState:
    description = need(event, "description", str)
    guard(description in state.dependencies, f"dependency {description!r} was never added")
    return state.model_copy(update={"dependencies": tuple(d for d in state.dependencies if d != description)})


def _job_depend(state: JobState, event: Event) -> JobState:
    guard(not state.depended, "depend logged twice")
    guard(not state.dependencies, f"depend with dependencies left: {list(state.dependencies)}")
    return state.model_copy(update={"depended": True})


def _job_priority(state: JobState, event: Event) -> JobState:
    return state.model_copy(update={"priority": need_index(event, "priority")})


def _job_alloc(state: JobState, event: Event) -> JobState:
    guard(not state.dependencies, f"alloc with dependencies left: {list(state.dependencies)}")
    return _enter(state, JobStatus.PROVISIONING, event.timestamp, instance=maybe(event, "instance", str))


def _job_finish(state: JobState, event: Event) -> JobState:
    guard(JobStatus.RUNNING in state.times, "finish before start")
    guard(state.exit_status is None, "finish logged twice")
    exit_status = need(event, "status", int)
    done = exit_status == 0
    reason = JobTerminationReason.DONE_BY_RUNNER if done else JobTerminationReason.CONTAINER_EXITED_WITH_ERROR
    return _terminate(state, reason, event.timestamp, exit_status=exit_status)


def _job_exception(state: JobState, event: Event) -> JobState:
    record = exception_record(event, maybe(event, "reason", JobTerminationReason))
    exceptions = (*state.exceptions, record)
    if record.severity > 0:
        return state.model_copy(update={"exceptions": exceptions})
    if record.reason is None:
        guard(state.status == JobStatus.TERMINATING, "a severity-0 exception needs a reason to terminate")
        return state.model_copy(update={"exceptions": exceptions})
    return _terminate(state, record.reason, event.timestamp, exceptions=exceptions)


def _job_release(state: JobState, event: Event) -> JobState:
    guard(state.allocated, "release without alloc")
    guard(not state.freed and not state.released, "release after free or after the final release")
    return state.model_copy(update={"released": maybe(event, "final", bool) or False})


def _job_free(state: JobState, event: Event) -> JobState:
    guard(state.allocated, "free without alloc")
    guard(not state.freed, "free logged twice")
    return state.model_copy(update={"freed": True})


def _job_clean(state: JobState, event: Event) -> JobState:
    status = need(event, "status", JobStatus)
    check_final(status, need(event, "reason", JobTerminationReason), state.termination_reason)
    return _enter(state, status, event.timestamp)


_JOB_HANDLERS: dict[str, Callable[[JobState, Event], JobState]] = {
    "validate": _job_validate,
    "invalidate": _job_invalidate,
    "dependency-add": _job_dependency_add,
    "dependency-remove": _job_dependency_remove,
    "depend": _job_depend,
    "priority": _job_priority,
    "alloc": _job_alloc,
    "pull": lambda state, event: _enter(state, JobStatus.PULLING, event.timestamp),
    "start": lambda state, event: _enter(state, JobStatus.RUNNING, event.timestamp),
    "finish": _job_finish,
    "exception": _job_exception,
    "release": _job_release,
    "free": _job_free,
    "clean": _job_clean,
    "memo": lambda state, event: state.model_copy(update={"memo": memo_update(state.memo, event)}),
}


def apply_job_event(state: JobState | None, event: Event) -> JobState:
    """The job state after `event` (`state` None: the log so far is empty). Never mutates `state`."""
    if state is None:
        check_event(None, event, JOB_EVENTS_FROM, False)
        return JobState(
            replica_num=need_index(event, "replica"),
            job_num=need_index(event, "job"),
            submission_num=need_index(event, "submission"),
            status=JobStatus.SUBMITTED,
            times={JobStatus.SUBMITTED: event.timestamp},
        )
    if not check_event(state.status, event, JOB_EVENTS_FROM, state.status.is_finished()):
        return state
    return _JOB_HANDLERS[event.name](state, event)


def replay_job(events: Iterable[Event]) -> JobState:
    """The state a job submission's eventlog leads to."""
    return fold(apply_job_event, events)
