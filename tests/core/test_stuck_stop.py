"""A stuck run stopped from outside (core.runs.stuck_stop): the events that end it are the ones a stop the
run had carried out would have stored, legal for the state machines, from whatever the store holds."""

from __future__ import annotations

from typing import Any

import pytest

from core.eventlog import Event, EventlogError
from core.jobs.state_machine import replay_job
from core.runs.state_machine import replay_run
from core.runs.stuck_stop import STUCK_EXCEPTION, StuckStop, end_stuck_run
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason

RUN = "run1"
JOB = f"{RUN}-r0-j0-s0"
NOTE = "workflow ferry/main/train stuck since 2026-11-26 09:14:03: [TMPRL1100] Nondeterminism error"


def ev(t: float, name: str, **context: Any) -> Event:
    return Event(timestamp=t, name=name, context=context)


def key(submission: int = 0, replica: int = 0) -> dict[str, int]:
    return {"replica": replica, "job": 0, "submission": submission}


SUBMIT = ev(0, "submit", run_name="train", project="main", user="ana", type="task")
RUNNING_RUN = [
    SUBMIT,
    ev(1, "job-submit", **key()),
    ev(2, "job-status", **key(), status="provisioning"),
    ev(2, "status", status="provisioning"),
    ev(3, "job-status", **key(), status="running"),
    ev(3, "status", status="running"),
]
RUNNING_JOB = [
    ev(1, "submit", **key()),
    ev(2, "alloc", instance="local"),
    ev(2, "pull"),
    ev(3, "start"),
]


def stop(abort: bool = False, unremoved: dict[str, str] | None = None) -> StuckStop:
    return StuckStop(RUN, abort, NOTE, 100.0, unremoved or {})


def test_a_running_run_ends_terminated_by_the_user_its_job_freed_and_clean() -> None:
    record = end_stuck_run(stop(), RUNNING_RUN, {JOB: RUNNING_JOB})
    assert record is not None
    assert (record.status, record.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.STOPPED_BY_USER,
    )
    assert record.start_seq == len(RUNNING_RUN) and record.finished_at == 100.0
    assert [e.name for e in record.events] == ["exception", "status", "job-finish", "clean"]
    assert record.events[0].context == {"type": STUCK_EXCEPTION, "severity": 1, "note": NOTE}
    [job] = record.jobs
    assert job.job_submission_id == JOB and job.start_seq == len(RUNNING_JOB)
    assert [e.name for e in job.events] == ["exception", "release", "free", "clean"]
    assert (job.status, job.termination_reason) == (
        JobStatus.TERMINATED,
        JobTerminationReason.TERMINATED_BY_USER,
    )
    assert job.instance_name == "local" and job.finished_at == 100.0
    # The stored logs with these appended replay to the same end.
    assert replay_run([*RUNNING_RUN, *record.events]).status == RunStatus.TERMINATED
    assert replay_job([*RUNNING_JOB, *job.events]).status == JobStatus.TERMINATED


def test_an_abort_gives_the_abort_reasons() -> None:
    record = end_stuck_run(stop(abort=True), RUNNING_RUN, {JOB: RUNNING_JOB})
    assert record is not None and record.termination_reason == RunTerminationReason.ABORTED_BY_USER
    assert record.jobs[0].termination_reason == JobTerminationReason.ABORTED_BY_USER


def test_a_task_that_could_not_be_removed_is_said_and_its_job_still_ends() -> None:
    why = "could not remove its task from host-1: unreachable"
    record = end_stuck_run(stop(unremoved={JOB: why}), RUNNING_RUN, {JOB: RUNNING_JOB})
    assert record is not None
    [job] = record.jobs
    assert [e.name for e in job.events] == ["exception", "exception", "free", "clean"]
    assert job.events[1].context == {"type": "free", "severity": 1, "note": why}


def test_a_job_that_already_ended_in_the_store_keeps_its_end_and_the_run_hears_it() -> None:
    """The job's process exited 0 and its clean was stored, but the stuck run never logged job-finish."""
    done_job = [
        *RUNNING_JOB,
        ev(4, "finish", status=0),
        ev(4, "release", ranks="all", final=True),
        ev(4, "free"),
        ev(4, "clean", status="done", reason="done_by_runner"),
    ]
    record = end_stuck_run(stop(), RUNNING_RUN, {JOB: done_job})
    assert record is not None and record.jobs == []
    finish = next(e for e in record.events if e.name == "job-finish")
    assert finish.context == {
        **key(),
        "status": JobStatus.DONE,
        "reason": JobTerminationReason.DONE_BY_RUNNER,
        "exit_status": 0,
    }


def test_a_job_terminating_for_its_own_reason_keeps_it() -> None:
    exited = [*RUNNING_JOB, ev(4, "finish", status=3)]
    record = end_stuck_run(stop(), RUNNING_RUN, {JOB: exited})
    assert record is not None
    [job] = record.jobs
    assert (job.status, job.exit_status) == (JobStatus.FAILED, 3)
    assert [e.name for e in job.events] == ["release", "free", "clean"]
    finish = next(e for e in record.events if e.name == "job-finish")
    assert finish.context["status"] == JobStatus.FAILED and finish.context["exit_status"] == 3


def test_a_queued_job_never_allocated_ends_without_a_free() -> None:
    queued_run = RUNNING_RUN[:2]
    queued_job = RUNNING_JOB[:1]
    record = end_stuck_run(stop(), queued_run, {JOB: queued_job})
    assert record is not None
    assert [e.name for e in record.jobs[0].events] == ["exception", "clean"]


def test_a_job_the_run_logged_but_whose_own_log_never_reached_the_store_ends_in_the_run_log() -> None:
    record = end_stuck_run(stop(), RUNNING_RUN, {})
    assert record is not None and record.jobs == [] and record.status == RunStatus.TERMINATED


def test_a_run_already_terminating_keeps_its_reason() -> None:
    failing = [*RUNNING_RUN, ev(5, "status", status="terminating", reason="job_failed")]
    record = end_stuck_run(stop(), failing, {JOB: RUNNING_JOB})
    assert record is not None
    assert (record.status, record.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    assert "status" not in [e.name for e in record.events]
    assert record.jobs[0].termination_reason == JobTerminationReason.TERMINATED_BY_SERVER


def test_a_finished_run_needs_nothing() -> None:
    ended = end_stuck_run(stop(), RUNNING_RUN, {JOB: RUNNING_JOB})
    assert ended is not None
    assert end_stuck_run(stop(), [*RUNNING_RUN, *ended.events], {}) is None


def test_a_pipeline_logs_its_running_tasks_end() -> None:
    task_run = end_stuck_run(StuckStop(f"{RUN}-t1", False, NOTE, 100.0, {}), RUNNING_RUN, {})
    assert task_run is not None
    pipeline = [
        ev(0, "submit", run_name="pipe", project="main", user="ana", type="pipeline"),
        ev(1, "task-start", task=1, of=2, run_id=f"{RUN}-t1"),
        ev(1, "status", status="running"),
    ]
    record = end_stuck_run(stop(), pipeline, {}, {f"{RUN}-t1": task_run})
    assert record is not None
    [task_end] = [e for e in record.events if e.name == "task-end"]
    assert task_end.context == {
        "task": 1,
        "status": RunStatus.TERMINATED,
        "reason": RunTerminationReason.STOPPED_BY_USER,
    }


def test_an_end_the_state_machine_refuses_is_never_returned() -> None:
    broken = [*RUNNING_JOB, ev(4, "clean", status="done", reason="done_by_runner")]  # clean while RUNNING
    with pytest.raises(EventlogError):
        end_stuck_run(stop(), RUNNING_RUN, {JOB: broken})
