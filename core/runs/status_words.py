"""A run's one-line status message, as `ferry ps`, the Web UI and notifications show it: words from its
replayed state (core.runs.state_machine)."""

from __future__ import annotations

from datetime import UTC, datetime

from core.configuration.specs import DependencyCondition
from core.runs.run_state import RunState
from core.status import JobTerminationReason, RunStatus, RunTerminationReason

WAITING_FOR = "waiting for "  # the message of a run waiting for others (docs/dependencies.md)


def status_message(state: RunState) -> str | None:
    """The run's one-line status message, as `ferry ps` shows it."""
    if state.tasks:
        reason = state.termination_reason
        ended = f": {reason.value.replace('_', ' ')}" if reason else ""
        return f"task {state.task} of {state.tasks}{ended}"
    if state.termination_reason == RunTerminationReason.DEPENDENCY_FAILED and state.exceptions:
        return state.exceptions[-1].note
    if state.termination_reason is not None:
        return state.termination_reason.value.replace("_", " ")
    if state.status == RunStatus.PENDING and state.waiting_for:
        return WAITING_FOR + ", ".join(_waiting_words(description) for description in state.waiting_for)
    if state.status == RunStatus.PENDING and state.next_at is not None:
        return f"next at {format_utc(state.next_at)}" + (
            f" (last cycle {state.last_cycle})" if state.last_cycle else ""
        )
    if state.status == RunStatus.PENDING:
        scaled_to_zero = all(job.termination_reason == JobTerminationReason.SCALED_DOWN for job in state.jobs)
        return "scaled to zero: a request wakes it" if scaled_to_zero else "retrying"
    return None


def _waiting_words(description: str) -> str:
    run, _, condition = description.partition(":")
    return f"{run} {DependencyCondition(condition).wording}"


def format_utc(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M UTC")
