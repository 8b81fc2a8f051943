"""A scheduled run's cycles (docs/schedules.md): PENDING until its schedule fires, one cycle of its jobs,
then PENDING again with the next trigger time (docs/schedules.md: a cycle not stopped by the user returns).

The schedule is a Temporal Schedule (activities/schedules.py): each trigger starts a cycle workflow
(workflows/cycle.py) that tells the run (`RunWorkflow.trigger`) and stays open until the run says the
cycle is over (`EndCycle`), so that the schedule's overlap policy (skip) sees the cycle as running. A
trigger that still reaches a run that is not waiting for one is recorded (`cycle-skip`) and answered at
once. A cycle retries within itself by the run's `retry`, as any run: its retry clock starts with it.
A configuration re-applied in place is taken between cycles (`reconfigure`): the cycle in progress, if
any, ends with the configuration it started with.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from croniter import croniter

from core.eventlog import Event
from core.runs.deploying import Deploy
from core.runs.effects import EndCycle, UpdateSchedule
from core.runs.machine import StepBuilder, actor
from core.runs.run_state import RunState
from core.status import RunStatus, RunTerminationReason
from core.wire.run_messages import CycleTrigger


def next_triggers(crons: tuple[str, ...] | list[str], after: float, count: int = 1) -> list[float]:
    """The next `count` times (UTC timestamps, after `after`) any of the cron expressions fires."""
    start = datetime.fromtimestamp(after, UTC)
    found: set[float] = set()
    for expression in crons:
        times = croniter(expression, start)
        found.update(times.get_next(float) for _ in range(count))
    return sorted(found)[:count]


def is_scheduled(b: StepBuilder) -> bool:
    return bool(b.plan.schedule)


def wait(b: StepBuilder) -> None:
    """The run waits in PENDING for its schedule's next trigger."""
    if b.state.status != RunStatus.PENDING:
        b.log("status", status=RunStatus.PENDING)
    [next_at] = next_triggers(b.plan.schedule, b.now)
    b.log("schedule-wait", next_at=next_at)


def between_cycles(state: RunState) -> bool:
    """Waiting for its next trigger: a re-applied configuration can be taken now."""
    return state.status == RunStatus.PENDING and state.next_at is not None


def reconfigure(b: StepBuilder, deploy: Deploy) -> None:
    """A changed configuration re-applied between cycles: logged (`deploy`), and the next cycles run it.
    A changed cron updates the Temporal Schedule in place, and the run waits for the new next trigger."""
    b.log("deploy", deployment=b.state.deployment + 1, changed=deploy.changed, **actor(deploy.by))
    crons = b.plan.schedule
    b.plan = deploy.plan.model_copy(update={"run_id": b.plan.run_id, "submitted_at": b.plan.submitted_at})
    if b.plan.schedule != crons:
        b.effect(UpdateSchedule(crons=list(b.plan.schedule)))
        wait(b)


def begin(b: StepBuilder, trigger: CycleTrigger) -> None:
    """A trigger: the next cycle starts (every replica anew) if the run waits for one; else it is skipped."""
    state = b.state
    if state.status != RunStatus.PENDING or state.next_at is None or b.stop is not None:
        b.log("cycle-skip", workflow_id=trigger.workflow_id, scheduled_at=trigger.scheduled_at)
        why = f"cycle {state.cycle} is {state.status}" if b.stop is None else "the run is stopping"
        b.effect(EndCycle(workflow_id=trigger.workflow_id, outcome=f"skipped: {why}"))
        return
    b.log("cycle", cycle=state.cycle + 1, workflow_id=trigger.workflow_id, scheduled_at=trigger.scheduled_at)
    b.plan = b.plan.model_copy(update={"submitted_at": b.now})  # the cycle's retry clock starts now
    b.submit_all()


def returns_to_pending(b: StepBuilder, reason: RunTerminationReason) -> bool:
    """Whether a cycle that ended for `reason` makes the run wait for the next one."""
    return is_scheduled(b) and b.state.cycle > 0 and not reason.is_by_user


def end(b: StepBuilder, reason: RunTerminationReason) -> None:
    """The cycle's jobs have all finished: recorded, its cycle workflow told, the run waits again."""
    workflow_id = b.state.cycle_workflow_id
    b.log("cycle-end", cycle=b.state.cycle, status=reason.to_status(), reason=reason)
    if workflow_id is not None:
        b.effect(EndCycle(workflow_id=workflow_id, outcome=reason.to_status().value))
    wait(b)


def release(b: StepBuilder, reason: RunTerminationReason) -> None:
    """The run ends (stopped by the user) during a cycle: its cycle workflow is told."""
    if b.state.cycle_workflow_id is not None:
        b.effect(EndCycle(workflow_id=b.state.cycle_workflow_id, outcome=reason.to_status().value))


def cycle_submissions(events: Iterable[Event], cycle: int | None) -> tuple[int, set[tuple[int, int, int]]]:
    """The job submissions (replica, job, submission) a scheduled run's cycle made (None: the latest
    cycle), from its eventlog, with that cycle's number (0: no cycle has begun)."""
    by_cycle: dict[int, set[tuple[int, int, int]]] = {}
    current = 0
    for event in events:
        if event.name == "cycle":
            current = int(event.context["cycle"])
        elif event.name == "job-submit":
            key = (int(event.context["replica"]), int(event.context["job"]), int(event.context["submission"]))
            by_cycle.setdefault(current, set()).add(key)
    chosen = current if cycle is None else cycle
    return chosen, by_cycle.get(chosen, set())
