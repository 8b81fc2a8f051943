"""A run's eventlog: replaying it gives the run's state, which feeds docs/runs.md STEP 2 again."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.configuration.retry import RetryPolicy
from core.eventlog import Event, EventlogError, from_jsonl, to_jsonl
from core.runs.derivation import derive_run_status
from core.runs.retry import pending_backoff
from core.runs.state_machine import (
    JOB_STATUS_RANK,
    RUN_EVENTS_FROM,
    RunJob,
    RunState,
    apply_run_event,
    replay_run,
)
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason

S = JobStatus
R = JobTerminationReason
RS = RunStatus
RR = RunTerminationReason


def ev(t: float, name: str, **context: Any) -> Event:
    return Event(timestamp=t, name=name, context=context)


def jev(t: float, name: str, replica: int, submission: int, **context: Any) -> Event:
    return ev(t, name, replica=replica, job=0, submission=submission, **context)


def stopping(t: float, reason: str) -> Event:
    return ev(t, "status", status="terminating", reason=reason)


SUBMIT = ev(0, "submit", run_name="train", project="main", user="ana", type="task")
# Replica 0 is interrupted, the run waits and resubmits it; the new submission finds no capacity.
RETRIED = [
    SUBMIT,
    jev(1, "job-submit", 0, 0),
    jev(2, "job-status", 0, 0, status="provisioning"),
    ev(2, "status", status="provisioning"),
    jev(3, "job-status", 0, 0, status="running"),
    ev(3, "status", status="running"),
    jev(500, "job-status", 0, 0, status="terminating", reason="interrupted_by_no_capacity"),
    jev(501, "job-finish", 0, 0, status="failed", reason="interrupted_by_no_capacity", exit_status=None),
    ev(501, "status", status="pending"),
    ev(501, "retry", replicas=[0], attempt=0, backoff=15),
    jev(516, "job-submit", 0, 1),
    ev(516, "status", status="submitted"),
    jev(520, "job-finish", 0, 1, status="failed", reason="failed_to_start_due_to_no_capacity"),
]


def test_run_replay_of_a_retried_run() -> None:
    state = replay_run(RETRIED)
    assert (state.run_name, state.project, state.user, state.run_type) == ("train", "main", "ana", "task")
    assert state.status == RS.SUBMITTED and state.status_since == 516
    assert state.times == {RS.SUBMITTED: 0, RS.PROVISIONING: 2, RS.RUNNING: 3, RS.PENDING: 501}
    assert (state.submissions, state.retries, state.retry_attempt) == (2, 1, 0)
    assert state.jobs == (
        RunJob(
            replica_num=0, job_num=0, submission_num=1, status=S.FAILED,
            termination_reason=R.FAILED_TO_START_DUE_TO_NO_CAPACITY, first_submitted_at=1, submitted_at=516,
            provisioned=False, last_provisioned_at=501,
        ),
    )  # fmt: skip
    # The views feed STEP 2: the no-capacity clock restarted when the job lost its instance at 501.
    decide = derive_run_status
    views = state.job_views()
    kwargs: dict[str, Any] = {"stop_criteria": "all-done", "run_submitted_at": 0, "attempt": 1}
    retry = RetryPolicy(duration="10m")
    assert decide(views, retry=retry, now=1101, **kwargs).status == RS.PENDING
    assert decide(views, retry=retry, now=1102, **kwargs).termination_reason == RR.RETRY_LIMIT_EXCEEDED


def test_run_replay_to_the_end() -> None:
    log = [
        SUBMIT,
        jev(1, "job-submit", 0, 0),
        jev(2, "job-submit", 1, 0),
        jev(3, "job-finish", 0, 0, status="done", reason="done_by_runner", exit_status=0, provisioned=True),
        ev(4, "exception", type="gateway", severity=3, note="slow"),
        ev(5, "status", status="terminating", reason="stopped_by_user"),
        ev(6, "status", status="terminating", reason="aborted_by_user"),  # stop escalated to abort
        jev(7, "job-finish", 1, 0, status="aborted", reason="aborted_by_user"),
        ev(8, "clean", status="terminated", reason="aborted_by_user"),
    ]
    state = replay_run(log)
    assert (state.status, state.termination_reason) == (RS.TERMINATED, RR.ABORTED_BY_USER)
    assert state.times[RS.TERMINATING] == 5 and state.times[RS.TERMINATED] == 8
    assert [(j.status, j.last_provisioned_at) for j in state.jobs] == [(S.DONE, 3), (S.ABORTED, None)]
    assert [x.severity for x in state.exceptions] == [3]


def test_001_STEP5_a_scheduled_run_goes_back_to_pending_once_its_jobs_finished() -> None:
    done = [*RETRIED[:2], jev(2, "job-finish", 0, 0, status="done", reason="done_by_runner")]
    log = [
        *done,
        ev(3, "status", status="terminating", reason="all_jobs_done"),
        ev(4, "status", status="pending"),
    ]
    assert replay_run(log).status == RS.PENDING and replay_run(log).termination_reason is None


def test_a_stale_report_about_an_older_submission_changes_nothing() -> None:
    stale = jev(521, "job-finish", 0, 0, status="terminated", reason="terminated_by_server")
    assert replay_run([*RETRIED, stale]) == replay_run(RETRIED)


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ([jev(1, "job-submit", 0, 0)], "first event must be submit"),
        ([ev(0, "submit", run_name="x", project="p", user="u")], "'type'"),
        ([SUBMIT, jev(1, "job-submit", 0, 1)], "submission 1, expected 0"),
        ([*RETRIED[:2], jev(2, "job-submit", 0, 2)], "submission 2, expected 1"),
        ([SUBMIT, jev(1, "job-status", 0, 0, status="running")], "never submitted"),
        ([*RETRIED[:6], jev(4, "job-status", 0, 0, status="provisioning")], "from running to provisioning"),
        ([*RETRIED[:2], jev(2, "job-status", 0, 0, status="done")], "a job finishes by job-finish"),
        ([*RETRIED[:2], jev(2, "job-status", 0, 0, status="terminating")], "needs a reason"),
        ([*RETRIED[:7], jev(4, "job-finish", 0, 0, status="failed", reason="executor_error")], "inconsist"),
        ([*RETRIED[:2], jev(2, "job-finish", 0, 0, status="failed", reason="done_by_runner")], "unknown"),
        ([*RETRIED[:8], jev(502, "job-finish", 0, 0, status="failed", reason="interrupted_by_no_capacity")],
         "already finished"),
        ([SUBMIT, ev(1, "status", status="done")], "only by clean"),
        ([SUBMIT, ev(1, "status", status="terminating")], "needs a reason"),
        ([SUBMIT, ev(1, "status", status="running", reason="job_failed")], "needs a reason"),
        ([SUBMIT, stopping(1, "job_failed"), ev(2, "status", status="running")], "goes only back to PENDING"),
        ([*RETRIED[:2], stopping(2, "job_failed"), ev(3, "status", status="pending")], "back to PENDING"),
        ([SUBMIT, stopping(1, "stopped_by_user"), ev(2, "status", status="pending")], "only back to PENDING"),
        ([SUBMIT, stopping(1, "job_failed"), jev(2, "job-submit", 0, 0)], "not legal in status terminating"),
        ([*RETRIED[:2], ev(2, "retry", replicas=[1], attempt=0, backoff=15)], "the run's replicas"),
        ([*RETRIED[:2], ev(2, "retry", replicas=[0, "1"], attempt=0, backoff=15)], "the run's replicas"),
        ([*RETRIED[:2], ev(2, "retry", replicas=[0], attempt=-1, backoff=15)], "negative"),
        ([*RETRIED[:2], stopping(2, "job_failed"), ev(3, "clean", status="failed", reason="job_failed")],
         "some jobs are still active"),
        ([SUBMIT, stopping(1, "job_failed"), ev(2, "clean", status="done", reason="all_jobs_done")],
         "inconsistent final transition"),
        ([SUBMIT, stopping(1, "job_failed"), ev(2, "clean", status="done", reason="job_failed")],
         "unknown final transition"),
        ([SUBMIT, ev(1, "clean", status="done", reason="all_jobs_done")], "not legal in status submitted"),
        ([SUBMIT, stopping(1, "job_failed"), ev(2, "clean", status="failed", reason="job_failed"),
          ev(3, "memo")], "after clean"),
    ],
)  # fmt: skip
def test_malformed_run_logs_are_rejected(events: list[Event], message: str) -> None:
    with pytest.raises(EventlogError, match=message) as info:
        replay_run(events)
    assert info.value.event == len(events)


# Property tests over legal run logs, built from the transition table.

GRID = [(replica, job) for replica in range(3) for job in range(2)]
REASONS = st.sampled_from(list(R))


def _active_jobs(state: RunState) -> list[RunJob]:
    return [j for j in state.jobs if j.status.is_active()]


def legal_run_events(state: RunState) -> list[str]:
    guards = {
        "job-status": any(j.status != S.TERMINATING for j in _active_jobs(state)),
        "job-finish": bool(_active_jobs(state)),
        "job-serving": bool(_active_jobs(state)),
        "clean": not _active_jobs(state),
        "cycle-end": not _active_jobs(state) and state.cycle > 0,
        "dependency-add": len(state.waiting_for) < 4,
        "dependency-remove": bool(state.waiting_for),
        "depend": not state.waiting_for,
        "task-start": state.task < 3,
        "task-end": state.task > 0,
    }
    names = [n for n, where in RUN_EVENTS_FROM.items() if state.status in where and guards.get(n, True)]
    return [*names, "debug.trace"]


def _job_numbers(job: RunJob) -> dict[str, int]:
    return {"replica": job.replica_num, "job": job.job_num, "submission": job.submission_num}


def run_context(draw: st.DrawFn, state: RunState, name: str) -> dict[str, Any]:
    if name == "status":
        rearm = not _active_jobs(state) and state.termination_reason not in (
            RR.STOPPED_BY_USER,
            RR.ABORTED_BY_USER,
        )
        targets = [RS.TERMINATING, *([RS.PENDING] if rearm else [])]
        if state.status != RS.TERMINATING:
            targets = [s for s in RS if s.is_active()]
        status = draw(st.sampled_from(targets))
        reason = {"reason": draw(st.sampled_from(list(RR))).value} if status == RS.TERMINATING else {}
        return {"status": status.value, **reason}
    if name == "job-submit":
        replica, job = draw(st.sampled_from(GRID))
        current = state.job(replica, job)
        return {
            "replica": replica,
            "job": job,
            "submission": 0 if current is None else current.submission_num + 1,
        }
    if name == "job-status":
        moving = draw(st.sampled_from([j for j in _active_jobs(state) if j.status != S.TERMINATING]))
        later = [s for s, rank in JOB_STATUS_RANK.items() if rank > JOB_STATUS_RANK[moving.status]]
        job_status = draw(st.sampled_from(later))
        why = {"reason": draw(REASONS).value} if job_status == S.TERMINATING else {}
        return {**_job_numbers(moving), "status": job_status.value, **why}
    if name == "job-finish":
        ending = draw(st.sampled_from(_active_jobs(state)))
        cause = ending.termination_reason or draw(REASONS)
        optional = {"exit_status": st.integers(0, 255), "provisioned": st.booleans()}
        extra = draw(st.fixed_dictionaries({}, optional=optional))
        return {**_job_numbers(ending), "status": cause.to_status().value, "reason": cause.value, **extra}
    if name == "retry":
        attempt = draw(st.integers(0, 8))
        replicas = sorted({j.replica_num for j in state.jobs})
        chosen = draw(st.lists(st.sampled_from(replicas), unique=True)) if replicas else []
        return {"replicas": chosen, "attempt": attempt, "backoff": pending_backoff(attempt)}
    if name == "exception":
        return {"type": "gateway", "severity": draw(st.integers(0, 7)), "note": draw(st.text(max_size=5))}
    if name == "clean":
        assert state.termination_reason is not None
        return {
            "status": state.termination_reason.to_status().value,
            "reason": state.termination_reason.value,
        }
    if name == "priority":
        return {"priority": draw(st.integers(0, 100))}
    if name == "scale":
        return {"replicas": draw(st.integers(0, 4)), "rps": draw(st.floats(0, 100))}
    if name == "deploy":
        return {"deployment": state.deployment + 1, "changed": ["commands"]}
    if name == "schedule-wait":
        return {"next_at": draw(st.floats(0, 2e9))}
    if name == "cycle":
        return {"cycle": state.cycle + 1, "workflow_id": "cycle-wf", "scheduled_at": draw(st.floats(0, 2e9))}
    if name == "cycle-skip":
        return {"workflow_id": "cycle-wf", "scheduled_at": draw(st.floats(0, 2e9))}
    if name == "cycle-end":
        assert state.termination_reason is not None
        cycle_reason = state.termination_reason
        return {"cycle": state.cycle, "status": cycle_reason.to_status().value, "reason": cycle_reason.value}
    if name == "dependency-add":
        run = draw(
            st.sampled_from([n for n in ("aa", "bb", "cc", "dd") if f"{n}:done" not in state.waiting_for])
        )
        return {"description": f"{run}:done", "run": run, "condition": "done"}
    if name == "dependency-remove":
        return {"description": draw(st.sampled_from(state.waiting_for))}
    if name == "depend":
        return {}
    if name == "task-start":
        return {"task": state.task + 1, "of": 3, "run_id": f"r-t{state.task + 1}"}
    if name == "task-end":
        return {"task": state.task, "status": "done", "reason": "all_jobs_done"}
    if name == "job-serving":
        serving = draw(st.sampled_from(_active_jobs(state)))
        return {**_job_numbers(serving), "state": draw(st.sampled_from(["probing", "ready", "draining"]))}
    return draw(st.dictionaries(st.sampled_from(["a", "b"]), st.none() | st.integers() | st.text(max_size=3)))


@st.composite
def run_logs(draw: st.DrawFn, complete: bool = False) -> list[Event]:
    """A legal run eventlog of some random steps; `complete` then terminates it and cleans it."""
    t = draw(st.floats(0, 2e9))
    events = [
        Event(
            timestamp=t, name="submit", context={"run_name": "r", "project": "p", "user": "u", "type": "task"}
        )
    ]
    state = apply_run_event(None, events[0])
    steps = draw(st.integers(0, 30))
    while not state.status.is_finished():
        if len(events) <= steps:
            name = draw(st.sampled_from(legal_run_events(state)))
        elif not complete:
            break
        elif state.status != RS.TERMINATING:
            name = "status"
        else:
            name = "job-finish" if _active_jobs(state) else "clean"
        context = run_context(draw, state, name)
        if len(events) > steps and name == "status":
            context = {"status": "terminating", "reason": draw(st.sampled_from(list(RR))).value}
        t += draw(st.floats(0, 1000))
        events.append(Event(timestamp=t, name=name, context=context))
        state = apply_run_event(state, events[-1])
    return events


@given(run_logs())
def test_run_replay_is_the_fold_of_apply_and_every_prefix_is_valid(log: list[Event]) -> None:
    state: RunState | None = None
    for n, event in enumerate(log, start=1):
        before = state.model_dump() if state is not None else None
        new = apply_run_event(state, event)
        assert (state.model_dump() if state is not None else None) == before  # apply never mutates its input
        state = new
        assert replay_run(log[:n]) == state
        assert state.status in RunStatus
        assert (state.termination_reason is not None) == (
            state.status == RS.TERMINATING or state.status.is_finished()
        )
        # The replayed jobs are always valid input for STEP 2, whose answer is always an active status.
        decision = derive_run_status(
            state.job_views(),
            stop_criteria="all-done",
            retry=RetryPolicy(),
            now=event.timestamp,
            run_submitted_at=0,
        )
        assert decision.status.is_active()
    assert replay_run(log) == state


@given(run_logs())
def test_run_jsonl_round_trip_replays_the_same(log: list[Event]) -> None:
    assert from_jsonl(to_jsonl(log)) == log
    assert replay_run(from_jsonl(to_jsonl(log))) == replay_run(log)


@given(run_logs(complete=True))
def test_complete_run_logs_end_in_the_status_their_reason_leads_to(log: list[Event]) -> None:
    state = replay_run(log)
    assert state.termination_reason is not None and state.status == state.termination_reason.to_status()
    assert all(j.status.is_finished() for j in state.jobs)


@given(run_logs(), st.sampled_from(sorted(set(RUN_EVENTS_FROM) - {"submit"})))
def test_a_run_log_whose_first_event_is_not_submit_is_rejected(log: list[Event], name: str) -> None:
    with pytest.raises(EventlogError, match="first event must be submit") as info:
        replay_run([Event(timestamp=0, name=name), *log[1:]])
    assert info.value.event == 1


@given(run_logs(complete=True), st.sampled_from(list(RS)), st.sampled_from(list(RR)))
def test_a_run_clean_inconsistent_with_its_reason_is_rejected(
    log: list[Event], status: RS, reason: RR
) -> None:
    clean = log[-1]
    if (status, reason.value) == (reason.to_status(), clean.context["reason"]):
        return  # that is the consistent clean
    bad = Event(
        timestamp=clean.timestamp, name="clean", context={"status": status.value, "reason": reason.value}
    )
    with pytest.raises(EventlogError, match="unknown final transition|inconsistent final transition"):
        replay_run([*log[:-1], bad])


@given(run_logs(complete=True), st.sampled_from([*RUN_EVENTS_FROM, "debug.x"]))
def test_any_event_after_a_run_is_clean_is_rejected(log: list[Event], name: str) -> None:
    with pytest.raises(EventlogError, match="after clean: the log is closed") as info:
        replay_run([*log, ev(log[-1].timestamp, name)])
    assert info.value.event == len(log) + 1
