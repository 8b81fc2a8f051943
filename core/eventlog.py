"""Eventlogs (Flux RFC 18 shape): events, their JSON-lines form, and the pieces every state machine built
on them shares (docs/eventlog.md).

Every job submission and every run has an append-only log of `{"timestamp", "name", "context"}` objects.
The job's machine is `core.jobs.state_machine`, the run's `core.runs.state_machine`; both are folds
(`fold`) of a pure one-event step, checked by `check_event` against their table of where each event is
legal. Anything else raises EventlogError naming the line (JSON lines) or the event (replay).
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


class ExceptionRecord(BaseModel):
    """One `exception` event (RFC 21): severity 0 is fatal, 1-7 are recorded only."""

    model_config = ConfigDict(frozen=True)

    timestamp: float
    type: str
    severity: int = Field(ge=0, le=7)
    note: str | None = None
    reason: JobTerminationReason | None = None


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


def guard(ok: bool, reason: str) -> None:
    if not ok:
        raise EventlogError(reason)


def check_final(
    status: JobStatus | RunStatus,
    reason: JobTerminationReason | RunTerminationReason,
    expected: JobTerminationReason | RunTerminationReason | None,
) -> None:
    """A final transition (clean; job-finish in a run's log) must go to a finished status, the one its
    reason leads to, for the reason the log started terminating with."""
    guard(status.is_finished(), f"unknown final transition: clean to {status}, which is not finished")
    leads_to = reason.to_status()
    guard(leads_to == status, f"unknown final transition: {reason} leads to {leads_to}, not {status}")
    guard(
        reason == expected, f"inconsistent final transition: reason {reason}, but terminating for {expected}"
    )


def check_event(status: Any, event: Event, legal_from: dict[str, frozenset[Any]], closed: bool) -> bool:
    """The checks both machines share: submit first, nothing after clean, known events where the table
    allows them. `status` is None for an empty log. False for a debug event, which changes nothing."""
    if status is None:
        guard(event.name == "submit", f"the first event must be submit, got {event.name!r}")
        return True
    guard(not closed, "event after clean: the log is closed")
    if event.name.startswith(DEBUG_PREFIX):
        return False
    guard(event.name in legal_from, f"unknown event {event.name!r}")
    guard(status in legal_from[event.name], f"not legal in status {status}")
    return True


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
