"""A run that waits for others, as pure steps (docs/dependencies.md): what each piece of news means to each
condition, the waiting run's events and effects, its failure at once, and the cycles refused at apply."""

from __future__ import annotations

import pytest

from core.configuration.specs import DependencyCondition
from core.runs.effects import StartJob, WatchRun
from core.runs.lifecycle import Inbox, advance, submit_run
from core.runs.state_machine import replay_run
from core.runs.status_words import status_message
from core.runs.watching import Verdict, dependency_cycle, verdict
from core.status import RunStatus, RunTerminationReason
from core.wire.run_messages import DependencyTarget, RunNews
from tests.core.test_run_lifecycle import T0, keys_of, run_input, said

C = DependencyCondition
RS = RunStatus
RR = RunTerminationReason


def target(name: str, condition: C = C.DONE, exists: bool = True) -> DependencyTarget:
    return DependencyTarget(
        run_name=name,
        condition=condition,
        run_id=f"{name}-1" if exists else None,
        workflow_id=f"ferry/main/{name}" if exists else None,
    )


def news_of(name: str, status: RS, reason: RR | None = None, started: bool = False) -> RunNews:
    return RunNews(run_id=f"{name}-1", status=status, termination_reason=reason, started=started)


def waiting_run(*targets: DependencyTarget):
    inp = run_input("task").model_copy(update={"dependencies": list(targets)})
    return submit_run(inp, T0)


@pytest.mark.parametrize(
    ("condition", "status", "reason", "started", "expected"),
    [
        (C.DONE, RS.RUNNING, None, True, Verdict.WAIT),
        (C.DONE, RS.DONE, RR.ALL_JOBS_DONE, True, Verdict.MET),
        (C.DONE, RS.FAILED, RR.JOB_FAILED, True, Verdict.NEVER),
        (C.DONE, RS.TERMINATED, RR.STOPPED_BY_USER, False, Verdict.NEVER),
        (C.FINISHED, RS.PENDING, None, False, Verdict.WAIT),
        (C.FINISHED, RS.FAILED, RR.JOB_FAILED, True, Verdict.MET),
        (C.FINISHED, RS.DONE, RR.ALL_JOBS_DONE, True, Verdict.MET),
        (C.FAILED, RS.DONE, RR.ALL_JOBS_DONE, True, Verdict.NEVER),
        (C.FAILED, RS.TERMINATED, RR.ABORTED_BY_USER, True, Verdict.MET),
        (C.FAILED, RS.RUNNING, None, True, Verdict.WAIT),
        (C.STARTED, RS.PROVISIONING, None, False, Verdict.WAIT),
        (C.STARTED, RS.RUNNING, None, True, Verdict.MET),
        (C.STARTED, RS.PENDING, None, True, Verdict.MET),  # ran, now retrying: it has started
        (C.STARTED, RS.FAILED, RR.JOB_FAILED, False, Verdict.NEVER),
    ],
)
def test_what_news_means_to_each_condition(
    condition: C, status: RS, reason: RR | None, started: bool, expected: Verdict
) -> None:
    assert verdict(condition, news_of("prep", status, reason, started)) == expected


def test_a_waiting_run_is_pending_watches_and_starts_when_the_last_dependency_is_met() -> None:
    first = waiting_run(target("prep"), target("data", C.STARTED))
    state = first.machine.state
    assert state.status == RS.PENDING and state.waiting_for == ("prep:done", "data:started")
    assert status_message(state) == "waiting for prep to be done, data to start"
    assert first.effects == [
        WatchRun(run_id="prep-1", workflow_id="ferry/main/prep"),
        WatchRun(run_id="data-1", workflow_id="ferry/main/data"),
    ]
    nothing = advance(first.machine, Inbox(news=[news_of("prep", RS.RUNNING, started=True)]), T0 + 1)
    assert nothing.events == [] and nothing.effects == []
    one = advance(nothing.machine, Inbox(news=[news_of("data", RS.RUNNING, started=True)]), T0 + 2)
    assert said(one.events) == [("dependency-remove", {"description": "data:started"})]
    older = RunNews(run_id="prep-0", status=RS.DONE, termination_reason=RR.ALL_JOBS_DONE)
    assert advance(one.machine, Inbox(news=[older]), T0 + 3).events == []  # another run of that name
    both = advance(one.machine, Inbox(news=[news_of("prep", RS.DONE, RR.ALL_JOBS_DONE, True)]), T0 + 4)
    assert [name for name, _ in said(both.events)][:4] == [
        "dependency-remove",
        "depend",
        "status",
        "job-submit",
    ]
    assert keys_of(both.effects, StartJob) == [(0, 0, 0)]
    assert both.machine.state.status == RS.SUBMITTED
    assert replay_run([*first.events, *one.events, *both.events]) == both.machine.state


def test_a_dependency_that_can_no_longer_be_met_fails_the_run_at_once() -> None:
    first = waiting_run(target("prep"))
    failed = advance(first.machine, Inbox(news=[news_of("prep", RS.FAILED, RR.JOB_FAILED, True)]), T0 + 5)
    state = failed.machine.state
    assert (state.status, state.termination_reason) == (RS.FAILED, RR.DEPENDENCY_FAILED)
    assert failed.machine.done and failed.effects == []
    assert status_message(state) == "run prep ended failed (job failed); this run waited for it to be done"


def test_a_run_waiting_for_a_run_that_does_not_exist_ends_in_its_first_step() -> None:
    first = waiting_run(target("ghost", exists=False))
    assert first.machine.done and first.effects == []
    assert first.machine.state.termination_reason == RR.DEPENDENCY_FAILED
    assert (
        status_message(first.machine.state) == "run ghost does not exist; this run waited for it to be done"
    )


def test_a_stop_while_waiting_ends_the_run() -> None:
    from core.runs.machine import StopKind

    first = waiting_run(target("prep"))
    stopped = advance(first.machine, Inbox(stop=StopKind.STOP), T0 + 1)
    assert stopped.machine.state.status == RS.TERMINATED and stopped.machine.done


def test_cycles_through_the_runs_still_waiting() -> None:
    waits = {"bb": ["cc"], "cc": ["aa"], "dd": []}
    assert dependency_cycle("aa", ["bb"], lambda name: waits.get(name, [])) == ["aa", "bb", "cc", "aa"]
    assert dependency_cycle("aa", ["aa"], lambda name: []) == ["aa", "aa"]
    assert dependency_cycle("aa", ["dd", "ee"], lambda name: waits.get(name, [])) is None
