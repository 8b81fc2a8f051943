"""Eventlogs (Flux RFC 18 shape): events, their JSON-lines form, and the job state machine of RFC 21.

Every job submission and every run has an append-only log of `{"timestamp", "name", "context"}` objects.
`apply_job_event` is one step of a job's state machine and never mutates its input; `replay_job` is
the fold of it over a log. The run's machine, built on the same pieces, is in `core.replay`.
The table says where each job event is legal; the guards noted beside it keep a log self-consistent.
Anything else raises EventlogError naming the line (JSON lines) or the event (replay).

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

import json
import math
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason

_T = TypeVar("_T")
_S = TypeVar("_S")

DEBUG_PREFIX = "debug."  # RFC 21: debug events carry no meaning for the state


class EventlogError(ValueError):
    """A malformed event or log. `line` is the 1-based line of a JSON-lines text, `event` the 1-based
    position of an event in a log being replayed; the message starts with whichever is known."""

    def __init__(self, reason: str, *, line: int | None = None, event: int | None = None) -> None:
        self.reason = reason
        self.line = line
        self.event = event
        where = f"line {line}: " if line is not None else f"event {event}: " if event is not None else ""
        super().__init__(f"{where}{reason}")


class Event(BaseModel):
    """One eventlog entry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timestamp: float
    name: str = Field(min_length=1)
    context: dict[str, Any] = Field(default_factory=dict)

    @field_validator("timestamp", mode="before")
    @classmethod
    def _finite_number(cls, value: Any) -> Any:
        problem = _timestamp_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    def to_json(self) -> str:
        """One line of JSON, no trailing newline; the context is always written, even when empty."""
        return json.dumps(
            {"timestamp": self.timestamp, "name": self.name, "context": self.context},
            separators=(",", ":"),
            allow_nan=False,
        )

    @classmethod
    def from_json(cls, line: str, *, line_no: int | None = None) -> Event:
        """Parse one line; anything but an RFC 18 event object raises EventlogError naming the line."""
        try:
            raw = json.loads(line, parse_constant=_reject_constant)
        except ValueError as exc:
            raise EventlogError(f"not valid JSON ({exc})", line=line_no) from None
        if not isinstance(raw, dict):
            raise EventlogError(f"an event must be a JSON object, got {type(raw).__name__}", line=line_no)
        problem = _shape_problem(raw)
        if problem:
            raise EventlogError(problem, line=line_no)
        return cls.model_validate(raw)


_KEYS = frozenset({"timestamp", "name", "context"})


def _shape_problem(raw: dict[str, Any]) -> str | None:
    if set(raw) - _KEYS:
        return f"unexpected keys {sorted(set(raw) - _KEYS)}"
    if "timestamp" not in raw or "name" not in raw:
        return "an event needs a timestamp and a name"
    if not isinstance(raw["name"], str) or not raw["name"]:
        return f"name must be a non-empty string, got {raw['name']!r}"
    if not isinstance(raw.get("context", {}), dict):
        return f"context must be an object, got {type(raw['context']).__name__}"
    return _timestamp_problem(raw["timestamp"])


def _timestamp_problem(value: Any) -> str | None:
    # pydantic would take True for 1.0; JSON cannot carry NaN or infinities portably.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"timestamp must be a number, got {value!r}"
    return None if math.isfinite(value) else f"timestamp must be finite, got {value!r}"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def to_jsonl(events: Iterable[Event]) -> str:
    """The log as JSON lines, each ending in a newline ('' for an empty log)."""
    return "".join(event.to_json() + "\n" for event in events)


def from_jsonl(text: str) -> list[Event]:
    """Parse JSON lines; blank lines are skipped, and an error names the 1-based line it is on."""
    # Split on newlines only: str.splitlines would also cut at U+2028 and friends inside JSON strings.
    lines = text.split("\n")
    return [Event.from_json(line, line_no=n) for n, line in enumerate(lines, start=1) if line.strip()]


# Context readers shared by the job and run machines; the replay prefixes the event's name and position.


def need(event: Event, key: str, kind: type[_T]) -> _T:
    """The context's `key`, which must be there and be a `kind` (int excludes bool; enums by value)."""
    value = maybe(event, key, kind)
    if value is None:
        raise EventlogError(f"context needs {key!r}")
    return value


def maybe(event: Event, key: str, kind: type[_T]) -> _T | None:
    """Like `need`, but a missing key (or null) is None."""
    value = event.context.get(key)
    if value is None:
        return None
    if isinstance(kind, type) and issubclass(kind, StrEnum):
        try:
            return kind(value)
        except ValueError:
            raise EventlogError(f"unknown {key} {value!r}") from None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise EventlogError(f"{key!r} must be {kind.__name__}, got {value!r}")
    return value


def need_index(event: Event, key: str) -> int:
    """A replica, job, submission or attempt number: a non-negative integer."""
    value = need(event, key, int)
    if value < 0:
        raise EventlogError(f"{key!r} cannot be negative, got {value}")
    return value


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


class ExceptionRecord(BaseModel):
    """One `exception` event (RFC 21): severity 0 is fatal, 1-7 are recorded only."""

    model_config = ConfigDict(frozen=True)

    timestamp: float
    type: str
    severity: int = Field(ge=0, le=7)
    note: str | None = None
    reason: JobTerminationReason | None = None


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


def memo_update(memo: dict[str, Any], event: Event) -> dict[str, Any]:
    """RFC 21 memo: keys replace earlier values, and null removes a key."""
    return {k: v for k, v in {**memo, **event.context}.items() if v is not None}


def exception_record(event: Event, reason: JobTerminationReason | None = None) -> ExceptionRecord:
    severity = need(event, "severity", int)
    if not 0 <= severity <= 7:
        raise EventlogError(f"severity must be 0-7, got {severity}")
    note = maybe(event, "note", str)
    return ExceptionRecord(
        timestamp=event.timestamp, type=need(event, "type", str), severity=severity, note=note, reason=reason
    )


def _enter(state: JobState, status: JobStatus, at: float, **updates: Any) -> JobState:
    times = state.times if status in state.times else {**state.times, status: at}
    return state.model_copy(update={"status": status, "times": times, **updates})


def _terminate(state: JobState, reason: JobTerminationReason, at: float, **updates: Any) -> JobState:
    if state.status == JobStatus.TERMINATING:
        return state.model_copy(update=updates)  # the reason that started the termination stays
    return _enter(state, JobStatus.TERMINATING, at, termination_reason=reason, **updates)


def _guard(ok: bool, reason: str) -> None:
    if not ok:
        raise EventlogError(reason)


def _job_validate(state: JobState, event: Event) -> JobState:
    _guard(not state.validated, "validate logged twice")
    return state.model_copy(update={"validated": True})


def _job_invalidate(state: JobState, event: Event) -> JobState:
    _guard(not state.validated, "invalidate after validate")
    reason = maybe(event, "reason", JobTerminationReason) or JobTerminationReason.TERMINATED_BY_SERVER
    return _terminate(state, reason, event.timestamp)


def _job_dependency_add(state: JobState, event: Event) -> JobState:
    description = need(event, "description", str)
    _guard(not state.depended, "dependency-add after depend")
    _guard(description not in state.dependencies, f"dependency {description!r} added twice")
    return state.model_copy(update={"dependencies": (*state.dependencies, description)})


def _job_dependency_remove(state: JobState, event: Event) -> JobState:
    description = need(event, "description", str)
    _guard(description in state.dependencies, f"dependency {description!r} was never added")
    return state.model_copy(update={"dependencies": tuple(d for d in state.dependencies if d != description)})


def _job_depend(state: JobState, event: Event) -> JobState:
    _guard(not state.depended, "depend logged twice")
    _guard(not state.dependencies, f"depend with dependencies left: {list(state.dependencies)}")
    return state.model_copy(update={"depended": True})


def _job_priority(state: JobState, event: Event) -> JobState:
    return state.model_copy(update={"priority": need_index(event, "priority")})


def _job_alloc(state: JobState, event: Event) -> JobState:
    _guard(not state.dependencies, f"alloc with dependencies left: {list(state.dependencies)}")
    return _enter(state, JobStatus.PROVISIONING, event.timestamp, instance=maybe(event, "instance", str))


def _job_finish(state: JobState, event: Event) -> JobState:
    _guard(JobStatus.RUNNING in state.times, "finish before start")
    _guard(state.exit_status is None, "finish logged twice")
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
        _guard(state.status == JobStatus.TERMINATING, "a severity-0 exception needs a reason to terminate")
        return state.model_copy(update={"exceptions": exceptions})
    return _terminate(state, record.reason, event.timestamp, exceptions=exceptions)


def _job_release(state: JobState, event: Event) -> JobState:
    _guard(state.allocated, "release without alloc")
    _guard(not state.freed and not state.released, "release after free or after the final release")
    return state.model_copy(update={"released": maybe(event, "final", bool) or False})


def _job_free(state: JobState, event: Event) -> JobState:
    _guard(state.allocated, "free without alloc")
    _guard(not state.freed, "free logged twice")
    return state.model_copy(update={"freed": True})


def check_final(
    status: JobStatus | RunStatus,
    reason: JobTerminationReason | RunTerminationReason,
    expected: JobTerminationReason | RunTerminationReason | None,
) -> None:
    """A final transition (clean; job-finish in a run's log) must go to a finished status, the one its
    reason leads to, for the reason the log started terminating with."""
    _guard(status.is_finished(), f"unknown final transition: clean to {status}, which is not finished")
    leads_to = reason.to_status()
    _guard(leads_to == status, f"unknown final transition: {reason} leads to {leads_to}, not {status}")
    _guard(
        reason == expected, f"inconsistent final transition: reason {reason}, but terminating for {expected}"
    )


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


def check_event(status: Any, event: Event, legal_from: dict[str, frozenset[Any]], closed: bool) -> bool:
    """The checks both machines share: submit first, nothing after clean, known events where the table
    allows them. `status` is None for an empty log. False for a debug event, which changes nothing."""
    if status is None:
        _guard(event.name == "submit", f"the first event must be submit, got {event.name!r}")
        return True
    _guard(not closed, "event after clean: the log is closed")
    if event.name.startswith(DEBUG_PREFIX):
        return False
    _guard(event.name in legal_from, f"unknown event {event.name!r}")
    _guard(status in legal_from[event.name], f"not legal in status {status}")
    return True


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


def fold(apply: Callable[[_S | None, Event], _S], events: Iterable[Event]) -> _S:
    """Replay: apply each event in turn. Errors are re-raised naming the 1-based event and its name."""
    state: _S | None = None
    for n, event in enumerate(events, start=1):
        try:
            state = apply(state, event)
        except EventlogError as exc:
            raise EventlogError(f"{event.name}: {exc.reason}", event=n) from None
    if state is None:
        raise EventlogError("the log is empty: the first event must be submit")
    return state


def replay_job(events: Iterable[Event]) -> JobState:
    """The state a job submission's eventlog leads to."""
    return fold(apply_job_event, events)
