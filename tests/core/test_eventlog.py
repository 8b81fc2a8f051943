"""Eventlogs (Flux RFC 21, docs/eventlog.md): the event format, JSON lines, the job state machine's replay."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from core.eventlog import Event, EventlogError, from_jsonl, to_jsonl
from core.jobs.state_machine import JOB_EVENTS_FROM, JobState, apply_job_event, replay_job
from core.status import JobStatus, JobTerminationReason

S = JobStatus
R = JobTerminationReason


def ev(t: float, name: str, **context: Any) -> Event:
    return Event(timestamp=t, name=name, context=context)


def fatal(t: float, reason: str) -> Event:
    return ev(t, "exception", type="cancel", severity=0, reason=reason)


SUBMIT = ev(1, "submit", replica=1, job=2, submission=3)
STARTED = [SUBMIT, ev(2, "alloc"), ev(3, "start")]
HAPPY = [
    SUBMIT,
    ev(2, "validate"),
    ev(2.5, "dependency-add", description="after-build"),
    ev(2.7, "dependency-remove", description="after-build"),
    ev(3, "depend"),
    ev(4, "priority", priority=16),
    ev(5, "alloc", instance="host-a"),
    ev(6, "pull"),
    ev(7, "start"),
    ev(7.5, "exception", type="oom-warning", severity=4, note="close to the limit"),
    ev(8, "memo", checkpoint="s3://b/1", step=10),
    ev(8.5, "memo", checkpoint=None),
    ev(8.7, "debug.anything", x=[1]),
    ev(9, "finish", status=0),
    ev(10, "release", final=True),
    ev(11, "free"),
    ev(12, "clean", status="done", reason="done_by_runner"),
]


def test_004_happy_path_replays_to_done() -> None:
    state = replay_job(HAPPY)
    assert (state.replica_num, state.job_num, state.submission_num) == (1, 2, 3)
    assert (state.status, state.termination_reason, state.exit_status) == (S.DONE, R.DONE_BY_RUNNER, 0)
    assert state.times == {
        S.SUBMITTED: 1,
        S.PROVISIONING: 5,
        S.PULLING: 6,
        S.RUNNING: 7,
        S.TERMINATING: 9,
        S.DONE: 12,
    }
    assert (state.instance, state.priority, state.memo) == ("host-a", 16, {"step": 10})
    assert [(x.type, x.severity) for x in state.exceptions] == [("oom-warning", 4)]
    assert state.validated and state.depended and state.released and state.freed and not state.dependencies


@pytest.mark.parametrize(
    ("events", "status", "reason", "exit_status"),
    [
        pytest.param(
            [ev(2, "exception", type="alloc", severity=0, reason="failed_to_start_due_to_no_capacity")],
            S.FAILED, R.FAILED_TO_START_DUE_TO_NO_CAPACITY, None, id="001-job-STEP2-no-capacity-fails",
        ),
        pytest.param(
            [ev(2, "alloc"), ev(3, "start"), ev(4, "finish", status=3)],
            S.FAILED, R.CONTAINER_EXITED_WITH_ERROR, 3, id="000-job-STEP4-non-zero-exit-fails",
        ),
        pytest.param(
            [ev(2, "alloc"), ev(3, "start"), fatal(4, "terminated_by_user"), ev(5, "finish", status=143),
             ev(6, "exception", type="free", severity=0, note="volume busy")],
            S.TERMINATED, R.TERMINATED_BY_USER, 143, id="004-first-severity-0-reason-wins-over-finish",
        ),
        pytest.param(
            [ev(2, "alloc"), ev(3, "start"), ev(4, "finish", status=0),
             ev(5, "exception", type="free", severity=0, reason="volume_error")],
            S.DONE, R.DONE_BY_RUNNER, 0, id="004-severity-0-while-terminating-is-recorded-only",
        ),
        pytest.param(
            [ev(2, "alloc"), ev(3, "exception", type="agent", severity=0, reason="instance_unreachable")],
            S.FAILED, R.INSTANCE_UNREACHABLE, None, id="001-job-STEP3-provisioning-fails",
        ),
        pytest.param(
            [ev(2, "invalidate")], S.TERMINATED, R.TERMINATED_BY_SERVER, None, id="004-invalidate-terminates",
        ),
        pytest.param(
            [ev(2, "alloc"), ev(3, "start"), fatal(4, "aborted_by_user")],
            S.ABORTED, R.ABORTED_BY_USER, None, id="001-job-STEP5-aborted",
        ),
    ],
)  # fmt: skip
def test_004_termination_paths(events: list[Event], status: S, reason: R, exit_status: int | None) -> None:
    terminating = replay_job([SUBMIT, *events])
    assert terminating.status == S.TERMINATING
    assert (terminating.termination_reason, terminating.exit_status) == (reason, exit_status)
    done = replay_job([SUBMIT, *events, ev(99, "clean", status=status.value, reason=reason.value)])
    assert done.status == status and done.times[status] == 99


@pytest.mark.parametrize(
    ("events", "message"),
    [
        pytest.param([], "empty", id="empty-log"),
        pytest.param([ev(1, "alloc")], "first event must be submit", id="first-not-submit"),
        pytest.param([ev(1, "debug.x")], "first event must be submit", id="first-debug"),
        pytest.param([ev(1, "submit", replica=0, job=0)], "'submission'", id="submit-without-numbers"),
        pytest.param([ev(1, "submit", replica=-1, job=0, submission=0)], "negative", id="negative-replica"),
        pytest.param([SUBMIT, SUBMIT], "not legal", id="submit-twice"),
        pytest.param([SUBMIT, ev(2, "teleport")], "unknown event", id="unknown-event"),
        pytest.param([SUBMIT, ev(2, "start")], "not legal in status submitted", id="start-before-alloc"),
        pytest.param([*STARTED, ev(4, "alloc")], "not legal", id="alloc-after-start"),
        pytest.param([*STARTED[:2], ev(3, "finish", status=0)], "not legal", id="finish-before-start"),
        pytest.param([SUBMIT, ev(2, "free")], "not legal", id="free-before-terminating"),
        pytest.param([SUBMIT, ev(2, "validate"), ev(3, "validate")], "twice", id="validate-twice"),
        pytest.param([SUBMIT, ev(2, "validate"), ev(3, "invalidate")], "after validate", id="late-invalid"),
        pytest.param([SUBMIT, ev(2, "dependency-remove", description="x")], "never added", id="unknown-dep"),
        pytest.param([SUBMIT, ev(2, "dependency-add", description="x"), ev(3, "alloc")], "dependencies left",
                     id="alloc-with-dependency"),
        pytest.param([SUBMIT, ev(2, "dependency-add", description="x"), ev(3, "depend")], "dependencies left",
                     id="depend-with-dependency"),
        pytest.param([SUBMIT, ev(2, "exception", type="x", severity=0)], "needs a reason", id="no-reason"),
        pytest.param([SUBMIT, ev(2, "exception", type="x", severity=8)], "0-7", id="severity-out-of-range"),
        pytest.param([SUBMIT, ev(2, "exception", severity=1)], "'type'", id="exception-without-type"),
        pytest.param([SUBMIT, ev(2, "exception", type="x", severity=0, reason="bogus")], "unknown reason",
                     id="unknown-reason"),
        pytest.param([SUBMIT, ev(2, "priority", priority="high")], "must be int", id="priority-not-int"),
        pytest.param([*STARTED, ev(4, "finish", status=True)], "must be int", id="finish-status-bool"),
        pytest.param([*STARTED, ev(4, "finish", status=0), ev(5, "finish", status=1)], "twice",
                     id="finish-twice"),
        pytest.param([SUBMIT, ev(2, "invalidate"), ev(3, "release", final=True)], "without alloc",
                     id="release-without-alloc"),
        pytest.param([*HAPPY[:-3], ev(10, "free"), ev(11, "release", final=True)], "after free",
                     id="release-after-free"),
        pytest.param([*HAPPY[:-1], ev(12, "clean", status="failed", reason="done_by_runner")],
                     "unknown final transition", id="clean-status-disagrees-with-reason"),
        pytest.param([*HAPPY[:-1], ev(12, "clean", status="terminating", reason="done_by_runner")],
                     "unknown final transition", id="clean-to-active-status"),
        pytest.param([*HAPPY[:-1], ev(12, "clean", status="failed", reason="executor_error")],
                     "inconsistent final transition", id="clean-reason-disagrees-with-log"),
        pytest.param([*HAPPY, ev(13, "memo", x=1)], "after clean", id="event-after-clean"),
        pytest.param([*HAPPY, ev(13, "debug.late")], "after clean", id="debug-after-clean"),
    ],
)  # fmt: skip
def test_004_malformed_job_logs_are_rejected(events: list[Event], message: str) -> None:
    with pytest.raises(EventlogError, match=message) as info:
        replay_job(events)
    assert info.value.event == (len(events) or None)


# JSON lines.


def test_event_json_is_one_line_with_rfc_18_keys() -> None:
    line = ev(1.5, "memo", note="a\nb\u2028c").to_json()
    assert "\n" not in line
    assert line == '{"timestamp":1.5,"name":"memo","context":{"note":"a\\nb\\u2028c"}}'
    assert Event.from_json(line) == ev(1.5, "memo", note="a\nb\u2028c")
    assert Event.from_json('{"timestamp":2,"name":"free"}') == ev(2, "free")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"timestamp":1,"name":"x","context":[1]}', "context must be an object, got list"),
        ('{"timestamp":1,"name":"x","context":"s"}', "context must be an object, got str"),
        ('{"timestamp":1,"name":"x","context":null}', "context must be an object"),
        ('{"timestamp":1,"context":{}}', "needs a timestamp and a name"),
        ('{"timestamp":1,"name":""}', "non-empty string"),
        ('{"timestamp":1,"name":7}', "non-empty string"),
        ('{"timestamp":true,"name":"x"}', "must be a number"),
        ('{"timestamp":"1","name":"x"}', "must be a number"),
        ('{"timestamp":NaN,"name":"x"}', "not valid JSON"),
        ('{"timestamp":1,"name":"x","extra":1}', "unexpected keys"),
    ],
)
def test_malformed_lines_are_rejected_with_their_line_number(line: str, message: str) -> None:
    text = to_jsonl(HAPPY[:2]) + "\n" + line + "\n"  # the blank line still counts
    with pytest.raises(EventlogError, match=f"^line 4: .*{message}") as info:
        from_jsonl(text)
    assert info.value.line == 4


def test_event_model_rejects_what_json_cannot_carry() -> None:
    for bad in (True, math.nan, math.inf, "1"):
        with pytest.raises(ValidationError):
            Event(timestamp=bad, name="x")
    with pytest.raises(ValidationError):
        Event(timestamp=1, name="")


def test_jsonl_of_an_empty_log() -> None:
    assert to_jsonl([]) == ""
    assert from_jsonl("") == [] and from_jsonl("\n\n") == []


# Property tests over legal logs, built from the transition table.

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
DESCRIPTIONS = ("after-build", "begin-time=5", "data-ready")
PROGRESS = frozenset({"alloc", "pull", "start", "finish", "release", "free", "clean"})


def legal_job_events(state: JobState) -> list[str]:
    """The events the table allows in `state.status`, less those the handlers' guards would refuse."""
    guards = {
        "validate": not state.validated,
        "invalidate": not state.validated,
        "dependency-add": not state.depended and len(state.dependencies) < len(DESCRIPTIONS),
        "dependency-remove": bool(state.dependencies),
        "depend": not state.depended and not state.dependencies,
        "alloc": not state.dependencies,
        "finish": S.RUNNING in state.times and state.exit_status is None,
        "release": state.allocated and not state.freed and not state.released,
        "free": state.allocated and not state.freed,
    }
    names = [n for n, where in JOB_EVENTS_FROM.items() if state.status in where and guards.get(n, True)]
    return [*names, "debug.trace"]


def job_context(draw: st.DrawFn, state: JobState, name: str) -> dict[str, Any]:
    if name == "dependency-add":
        return {
            "description": draw(st.sampled_from([d for d in DESCRIPTIONS if d not in state.dependencies]))
        }
    if name == "dependency-remove":
        return {"description": draw(st.sampled_from(state.dependencies))}
    if name == "exception":
        severity = draw(st.integers(0, 7))
        needs_reason = severity == 0 and state.status != S.TERMINATING
        reason = draw(st.sampled_from(list(R)) if needs_reason else st.none() | st.sampled_from(list(R)))
        note = draw(st.none() | st.text(max_size=10))
        context = {"type": draw(st.sampled_from(["cancel", "alloc", "oom"])), "severity": severity}
        return (
            context
            | ({"reason": reason.value} if reason else {})
            | ({"note": note} if note is not None else {})
        )
    if name == "clean":
        assert state.termination_reason is not None
        return {
            "status": state.termination_reason.to_status().value,
            "reason": state.termination_reason.value,
        }
    simple: dict[str, Any] = {
        "invalidate": st.just({}) | st.fixed_dictionaries({"reason": st.sampled_from([r.value for r in R])}),
        "priority": st.fixed_dictionaries({"priority": st.integers(0, 2**32 - 1)}),
        "alloc": st.just({}) | st.fixed_dictionaries({"instance": st.text(max_size=8)}),
        "finish": st.fixed_dictionaries({"status": st.integers(0, 255)}),
        "release": st.fixed_dictionaries({"final": st.booleans()}),
        "memo": st.dictionaries(st.sampled_from(["a", "b", "c"]), st.none() | json_values, max_size=3),
        "debug.trace": st.dictionaries(st.text(max_size=4), json_values, max_size=2),
    }
    return draw(simple.get(name, st.just({})))


@st.composite
def job_logs(draw: st.DrawFn, complete: bool = False) -> list[Event]:
    """A legal job eventlog of some random steps; `complete` then drives it on to its clean event."""
    t = draw(st.floats(0, 2e9))
    numbers = st.fixed_dictionaries({k: st.integers(0, 3) for k in ("replica", "job", "submission")})
    events = [Event(timestamp=t, name="submit", context=draw(numbers))]
    state = apply_job_event(None, events[0])
    steps = draw(st.integers(0, 20))
    while not state.status.is_finished():
        if len(events) <= steps:
            # Progress events count thrice, so that logs often get as far as running and finishing.
            names = legal_job_events(state)
            name = draw(st.sampled_from(names + [n for n in names if n in PROGRESS] * 2))
            context = job_context(draw, state, name)
        elif not complete:
            break
        elif state.status != S.TERMINATING:
            name, context = (
                "exception",
                {"type": "cancel", "severity": 0, "reason": draw(st.sampled_from(list(R)))},
            )
        else:
            name, context = "clean", job_context(draw, state, "clean")
        t += draw(st.floats(0, 1000))
        events.append(Event(timestamp=t, name=name, context=context))
        state = apply_job_event(state, events[-1])
    return events


@given(job_logs())
def test_004_replay_is_the_fold_of_apply_and_every_prefix_is_valid(log: list[Event]) -> None:
    state: JobState | None = None
    for n, event in enumerate(log, start=1):
        before = state.model_dump() if state is not None else None
        new = apply_job_event(state, event)
        assert (state.model_dump() if state is not None else None) == before  # apply never mutates its input
        state = new
        assert replay_job(log[:n]) == state
        assert state.status in JobStatus
        assert (state.termination_reason is not None) == (
            state.status == S.TERMINATING or state.status.is_finished()
        )
        assert state.status in state.times and all(state.times[s] <= event.timestamp for s in state.times)
    assert replay_job(log) == state


@given(job_logs())
def test_004_jsonl_round_trip_replays_the_same(log: list[Event]) -> None:
    text = to_jsonl(log)
    assert text.count("\n") == len(log)
    assert from_jsonl(text) == log
    assert replay_job(from_jsonl(text)) == replay_job(log)


@given(job_logs(complete=True))
def test_004_complete_logs_end_in_the_status_their_reason_leads_to(log: list[Event]) -> None:
    state = replay_job(log)
    assert state.termination_reason is not None and state.status == state.termination_reason.to_status()


@given(job_logs(), st.sampled_from(sorted(set(JOB_EVENTS_FROM) - {"submit"} | {"debug.x"})))
def test_004_a_log_whose_first_event_is_not_submit_is_rejected(log: list[Event], name: str) -> None:
    for bad in (log[1:], [ev(0, name), *log[1:]]):
        if bad:
            with pytest.raises(EventlogError, match="first event must be submit") as info:
                replay_job(bad)
            assert info.value.event == 1


@given(job_logs(), st.data())
def test_004_a_non_object_context_is_rejected_naming_its_line(log: list[Event], data: st.DataObject) -> None:
    lines = to_jsonl(log).splitlines()
    n = data.draw(st.integers(0, len(lines) - 1))
    context = data.draw(st.lists(json_values, max_size=2) | st.text(max_size=3) | st.integers() | st.none())
    lines[n] = json.dumps({"timestamp": 1, "name": "memo", "context": context})
    with pytest.raises(EventlogError, match=f"^line {n + 1}: context must be an object"):
        from_jsonl("\n".join(lines))


@given(job_logs(complete=True), st.sampled_from(list(S)), st.sampled_from(list(R)))
def test_004_clean_inconsistent_with_the_reason_is_rejected(log: list[Event], status: S, reason: R) -> None:
    clean = log[-1]
    if (status, reason.value) == (reason.to_status(), clean.context["reason"]):
        return  # that is the consistent clean
    bad = Event(
        timestamp=clean.timestamp, name="clean", context={"status": status.value, "reason": reason.value}
    )
    with pytest.raises(EventlogError, match="unknown final transition|inconsistent final transition") as info:
        replay_job([*log[:-1], bad])
    assert info.value.event == len(log)


@given(job_logs(complete=True), st.sampled_from([*JOB_EVENTS_FROM, "debug.x"]))
def test_004_any_event_after_clean_is_rejected(log: list[Event], name: str) -> None:
    with pytest.raises(EventlogError, match="after clean: the log is closed") as info:
        replay_job([*log, ev(log[-1].timestamp, name)])
    assert info.value.event == len(log) + 1
