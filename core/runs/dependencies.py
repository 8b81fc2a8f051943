"""A run that waits for others (docs/dependencies.md): PENDING until every dependency is met
(docs/dependencies.md#waiting), then submitted as any run; FAILED at once when one can no longer be met.

STEP 1 logs a `dependency-add` per dependency and asks the workflow to watch each run waited for
(`WatchRun`); that run then tells this one its status at every change (core.runs.watching), so waiting
costs no polling. A dependency met is removed (`dependency-remove`); the last one removed is `depend`,
and the run's jobs are submitted. A dependency on a run that does not exist, or one that ended otherwise,
is an `exception` of type `depend` and the run terminates with DEPENDENCY_FAILED.
"""

from __future__ import annotations

from core.runs.effects import WatchRun
from core.runs.machine import StepBuilder
from core.runs.watching import Verdict, verdict, why_never
from core.status import RunStatus, RunTerminationReason
from core.wire.run_messages import DependencyTarget, RunNews


def has_dependencies(b: StepBuilder) -> bool:
    return bool(b.plan.dependencies)


def wait(b: StepBuilder) -> None:
    """STEP 1 of a run with dependencies: each added and watched; the run PENDING (or failed at once)."""
    for target in b.plan.dependencies:
        b.log(
            "dependency-add",
            description=target.description(),
            run=target.run_name,
            condition=target.condition,
            run_id=target.run_id,
        )
    missing = next((t for t in b.plan.dependencies if t.run_id is None), None)
    if missing is not None:
        fail(b, f"run {missing.run_name} does not exist; this run waited for it {missing.condition.wording}")
        return
    b.log("status", status=RunStatus.PENDING)
    for target in b.plan.dependencies:
        assert target.run_id is not None and target.workflow_id is not None
        b.effect(WatchRun(run_id=target.run_id, workflow_id=target.workflow_id))


def waiting(b: StepBuilder) -> bool:
    return b.state.status == RunStatus.PENDING and bool(b.state.waiting_for)


def hear(b: StepBuilder, news: RunNews) -> None:
    """News of a run waited for: a dependency met is removed (the last one starts the run); one that can
    no longer be met fails the run. News of any other run (an older one of the same name) is ignored."""
    for target in _waiting_targets(b, news.run_id):
        if not waiting(b):
            return
        found = verdict(target.condition, news)
        if found == Verdict.NEVER:
            fail(b, why_never(target, news))
            return
        if found == Verdict.MET:
            b.log("dependency-remove", description=target.description())
            if not b.state.waiting_for:
                b.log("depend")
                b.log("status", status=RunStatus.SUBMITTED)
                b.submit_all()


def _waiting_targets(b: StepBuilder, run_id: str) -> list[DependencyTarget]:
    return [
        target
        for target in b.plan.dependencies
        if target.run_id == run_id and target.description() in b.state.waiting_for
    ]


def fail(b: StepBuilder, note: str) -> None:
    """A dependency can no longer be met: recorded (an `exception` of type `depend`,
    docs/dependencies.md#failing-at-once), the run ends."""
    b.log("exception", type="depend", severity=0, note=note)
    b.log("status", status=RunStatus.TERMINATING, reason=RunTerminationReason.DEPENDENCY_FAILED)
