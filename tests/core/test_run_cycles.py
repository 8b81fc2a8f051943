"""A scheduled run's cycles as pure steps (docs/schedules.md): PENDING until a trigger, a cycle of its
jobs, PENDING again with the next trigger time; a trigger during a cycle is skipped; a stop ends it."""

from __future__ import annotations

from datetime import UTC, datetime

from core.runs.cycles import between_cycles, next_triggers
from core.runs.deploying import Deploy, changed_fields, not_in_place
from core.runs.effects import EndCycle, StartJob, TerminateJob, UpdateSchedule
from core.runs.lifecycle import Inbox, advance, plan_of, submit_run
from core.runs.machine import RunMachine, Step, StopKind
from core.runs.state_machine import replay_run
from core.runs.status_words import status_message
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from core.wire.run_messages import CycleTrigger
from tests.core.test_run_lifecycle import T0, finished, keys_of, news, run_input, said

S = JobStatus
R = JobTerminationReason
NIGHTLY = {"schedule": {"cron": "0 2 * * *"}}
DAY = 86400.0


def trigger(machine: RunMachine, at: float, workflow_id: str = "cycle-1") -> Step:
    return advance(machine, Inbox(triggers=[CycleTrigger(workflow_id=workflow_id, scheduled_at=at)]), at)


def ends(step: Step) -> list[tuple[str, str]]:
    return [(e.workflow_id, e.outcome) for e in step.effects if isinstance(e, EndCycle)]


def test_next_triggers_of_several_crons_in_utc() -> None:
    start = datetime(2026, 1, 1, 1, 30, tzinfo=UTC).timestamp()
    times = next_triggers(["0 2 * * *", "30 1 * * *"], start, count=3)
    shown = [datetime.fromtimestamp(t, UTC).strftime("%d %H:%M") for t in times]
    assert shown == ["01 02:00", "02 01:30", "02 02:00"]


def test_a_scheduled_run_waits_pending_then_runs_a_cycle_and_waits_again() -> None:
    first = submit_run(run_input("task", **NIGHTLY), T0)
    assert first.effects == []  # nothing runs before the schedule fires
    state = first.machine.state
    assert state.status == RunStatus.PENDING and state.next_at == next_triggers(["0 2 * * *"], T0)[0]
    assert status_message(state) is not None and status_message(state).startswith("next at ")  # type: ignore[union-attr]
    cycle = trigger(first.machine, T0 + DAY)
    assert ("cycle", {"cycle": 1, "workflow_id": "cycle-1", "scheduled_at": T0 + DAY}) in said(cycle.events)
    assert keys_of(cycle.effects, StartJob) == [(0, 0, 0)]
    assert cycle.machine.state.status == RunStatus.SUBMITTED and cycle.machine.plan.submitted_at == T0 + DAY
    running = advance(
        cycle.machine, Inbox(updates=[news((0, 0, 0), S.RUNNING, at=T0 + DAY + 1)]), T0 + DAY + 1
    )
    done = advance(
        running.machine, Inbox(updates=[finished((0, 0, 0), R.DONE_BY_RUNNER, at=T0 + DAY + 9)]), T0 + DAY + 9
    )
    assert [n for n, _ in said(done.events)][-3:] == ["cycle-end", "status", "schedule-wait"]
    assert ends(done) == [("cycle-1", "done")]
    again = done.machine.state
    assert again.status == RunStatus.PENDING and again.last_cycle == "done" and not done.machine.done
    assert again.next_at is not None and again.next_at > T0 + DAY + 9
    assert status_message(again).endswith("(last cycle done)")  # type: ignore[union-attr]
    # The second cycle: the same job's next submission, its retry clock anew.
    second = trigger(done.machine, T0 + 2 * DAY, "cycle-2")
    assert keys_of(second.effects, StartJob) == [(0, 0, 1)]
    assert second.machine.state.job(0, 0).first_submitted_at == T0 + 2 * DAY  # type: ignore[union-attr]
    replayed = replay_run([*first.events, *cycle.events, *running.events, *done.events, *second.events])
    assert replayed == second.machine.state


def test_a_trigger_during_a_cycle_is_skipped_and_answered_at_once() -> None:
    cycle = trigger(submit_run(run_input("task", **NIGHTLY), T0).machine, T0 + DAY)
    skipped = trigger(cycle.machine, T0 + DAY + 60, "cycle-2")
    assert ("cycle-skip", {"workflow_id": "cycle-2", "scheduled_at": T0 + DAY + 60}) in said(skipped.events)
    assert ends(skipped) == [("cycle-2", "skipped: cycle 1 is submitted")]
    assert keys_of(skipped.effects, StartJob) == [] and skipped.machine.state.cycles_skipped == 1


def test_a_failed_cycle_returns_to_pending_too() -> None:
    cycle = trigger(submit_run(run_input("task", **NIGHTLY), T0).machine, T0 + DAY)
    failed = finished((0, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + DAY + 5, exit_status=1)
    step = advance(cycle.machine, Inbox(updates=[failed]), T0 + DAY + 5)
    assert step.machine.state.status == RunStatus.PENDING and step.machine.state.last_cycle == "failed"
    assert ends(step) == [("cycle-1", "failed")]


def test_a_stop_between_cycles_ends_the_run_and_one_during_a_cycle_releases_it() -> None:
    waiting = submit_run(run_input("task", **NIGHTLY), T0).machine
    stopped = advance(waiting, Inbox(stop=StopKind.STOP), T0 + 5)
    assert stopped.machine.state.status == RunStatus.TERMINATED and ends(stopped) == []
    assert stopped.machine.state.termination_reason == RunTerminationReason.STOPPED_BY_USER
    cycle = trigger(waiting, T0 + DAY)
    stopping = advance(cycle.machine, Inbox(stop=StopKind.STOP), T0 + DAY + 1)
    reason = stopping.machine.state.termination_reason
    assert reason == RunTerminationReason.STOPPED_BY_USER
    end = finished((0, 0, 0), reason.to_job_termination_reason(), at=T0 + DAY + 2)
    over = advance(stopping.machine, Inbox(updates=[end]), T0 + DAY + 2)
    assert over.machine.state.status == RunStatus.TERMINATED and ends(over) == [("cycle-1", "terminated")]


def reapplied(machine: RunMachine, at: float, **fields: object) -> Step:
    """The run re-applied in place with `fields` changed (as RunWorkflow.deploy hands it to the step)."""
    inp = run_input("task", **{**NIGHTLY, **fields})
    changed = changed_fields(run_input("task", **NIGHTLY).configuration, inp.configuration)
    return advance(machine, Inbox(deploy=Deploy(plan=plan_of(inp), changed=changed)), at)


def test_what_a_scheduled_run_may_change_in_place() -> None:
    old = run_input("task", **NIGHTLY).configuration
    placed = run_input("task", nodes=2, commands=["train v2"], schedule={"cron": "0 3 * * *"})
    assert not_in_place(old, placed.configuration) == []  # nothing runs between cycles: placement too
    unscheduled = run_input("task").configuration
    assert not_in_place(old, unscheduled) == ["schedule (removed: the run would no longer wait for it)"]
    assert not_in_place(old, run_input("service", **NIGHTLY).configuration)[0] == "type"
    # A run that was not scheduled is restarted to become one.
    assert not_in_place(unscheduled, old) == ["schedule"]


def test_a_new_cron_between_cycles_updates_the_schedule_and_the_next_trigger() -> None:
    waiting = submit_run(run_input("task", **NIGHTLY), T0).machine
    step = reapplied(waiting, T0 + 5, schedule={"cron": ["0 3 * * *", "0 15 * * *"]}, commands=["v2"])
    assert ("deploy", {"deployment": 1, "changed": ["schedule", "commands"]}) in said(step.events)
    assert [e for e in step.effects if isinstance(e, UpdateSchedule)] == [
        UpdateSchedule(crons=["0 3 * * *", "0 15 * * *"])
    ]
    state = step.machine.state
    assert state.status == RunStatus.PENDING and state.deployment == 1
    assert state.next_at == next_triggers(["0 3 * * *", "0 15 * * *"], T0 + 5)[0] != waiting.state.next_at
    # The next cycle's submissions are of the new deployment.
    cycle = trigger(step.machine, T0 + DAY)
    [submit] = [c for n, c in said(cycle.events) if n == "job-submit"]
    assert submit["deployment"] == 1 and not [e for e in cycle.effects if isinstance(e, TerminateJob)]
    replayed = replay_run([*submit_run(run_input("task", **NIGHTLY), T0).events, *step.events, *cycle.events])
    assert replayed == cycle.machine.state


def test_a_change_without_a_new_cron_keeps_the_schedule() -> None:
    waiting = submit_run(run_input("task", **NIGHTLY), T0).machine
    step = reapplied(waiting, T0 + 5, commands=["v2"])
    assert [n for n, _ in said(step.events)] == ["deploy"]
    assert step.effects == [] and step.machine.state.next_at == waiting.state.next_at


def test_a_re_apply_during_a_cycle_is_not_taken_by_the_step() -> None:
    """RunWorkflow holds it until the cycle ends (workflows test); the cycle goes on as it started."""
    cycle = trigger(submit_run(run_input("task", **NIGHTLY), T0).machine, T0 + DAY)
    assert not between_cycles(cycle.machine.state)
    step = reapplied(cycle.machine, T0 + DAY + 1, commands=["v2"])
    assert step.events == [] and step.effects == [] and step.machine == cycle.machine
