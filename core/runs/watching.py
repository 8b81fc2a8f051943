"""What one run tells the runs that wait for it (docs/dependencies.md), and what they make of it.

A run that waits for another (`depends_on`, `ferry apply --after`) is told that run's status each time it
changes (`RunNews`), from the moment it asks until the condition is met or can no longer be: no polling.
`verdict` is the one rule for what a piece of news means to a dependency.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from core.configuration.specs import DependencyCondition
from core.runs.run_state import RunState
from core.status import RunStatus
from core.wire.run_messages import DependencyTarget, RunNews


def run_news(run_id: str, state: RunState) -> RunNews:
    """The run's news, as its state says it, for those that wait for it."""
    return RunNews(
        run_id=run_id,
        status=state.status,
        termination_reason=state.termination_reason if state.status.is_finished() else None,
        started=RunStatus.RUNNING in state.times,
    )


class Verdict(StrEnum):
    MET = "met"
    WAIT = "wait"
    NEVER = "never"  # the condition can no longer be met


def verdict(condition: DependencyCondition, news: RunNews) -> Verdict:
    if condition == DependencyCondition.STARTED and news.started:
        return Verdict.MET
    if not news.status.is_finished():
        return Verdict.WAIT
    met = {
        DependencyCondition.DONE: news.status == RunStatus.DONE,
        DependencyCondition.FINISHED: True,
        DependencyCondition.FAILED: news.status != RunStatus.DONE,
        DependencyCondition.STARTED: False,  # ended without ever running
    }[condition]
    return Verdict.MET if met else Verdict.NEVER


def why_never(target: DependencyTarget, news: RunNews) -> str:
    """The waiting run's message when its dependency can no longer be met."""
    how = news.status.value
    if news.termination_reason is not None:
        how += f" ({news.termination_reason.value.replace('_', ' ')})"
    return f"run {target.run_name} ended {how}; this run waited for it {target.condition.wording}"


def dependency_cycle(
    name: str, waits_for: list[str], waits_of: Callable[[str], list[str]]
) -> list[str] | None:
    """A cycle the run `name`, waiting for `waits_for`, would close: the path from `name` back to it
    through what the active runs wait for (`waits_of`), e.g. [a, b, a]; None when there is none."""
    stack: list[tuple[str, list[str]]] = [(other, [name, other]) for other in waits_for]
    seen: set[str] = set()
    while stack:
        current, path = stack.pop()
        if current == name:
            return path
        if current in seen:
            continue
        seen.add(current)
        stack.extend((other, [*path, other]) for other in waits_of(current))
    return None
