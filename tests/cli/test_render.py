"""What `ferry ps`, `apply` and `events` say: the status messages and lines, without a server."""

from __future__ import annotations

from typing import Any

import pytest

from cli import render
from core.eventlog import Event
from core.status import JobStatus, JobTerminationReason, RunStatus
from store import JobSubmissionRecord, RunRecord

R = JobTerminationReason


@pytest.mark.parametrize(
    ("status", "reason", "exit_status", "message"),
    [
        (JobStatus.DONE, R.DONE_BY_RUNNER, 0, "exited (0)"),
        (JobStatus.FAILED, R.CONTAINER_EXITED_WITH_ERROR, 3, "exited (3)"),
        (JobStatus.TERMINATING, R.CONTAINER_EXITED_WITH_ERROR, 137, "exited (137)"),
        (JobStatus.FAILED, R.FAILED_TO_START_DUE_TO_NO_CAPACITY, None, "no capacity"),
        (JobStatus.FAILED, R.INSTANCE_UNREACHABLE, None, "interrupted"),
        (JobStatus.FAILED, R.INTERRUPTED_BY_NO_CAPACITY, None, "interrupted"),
        (JobStatus.TERMINATED, R.TERMINATED_BY_USER, 143, "stopped"),
        (JobStatus.ABORTED, R.ABORTED_BY_USER, None, "aborted"),
        (JobStatus.TERMINATED, R.MAX_DURATION_EXCEEDED, None, "max duration exceeded"),
        (JobStatus.FAILED, R.EXECUTOR_ERROR, None, "executor error"),
        (JobStatus.RUNNING, None, None, "running"),
        (JobStatus.SUBMITTED, None, None, "submitted"),
    ],
)
def test_job_message(status: JobStatus, reason: R | None, exit_status: int | None, message: str) -> None:
    assert render.job_message(status, reason, exit_status) == message


def test_job_message_while_waiting() -> None:
    assert render.job_message(JobStatus.PROVISIONING, None, None, provisioning_for=0.5) == "provisioning"
    long = render.CAPACITY_PATIENCE + 1
    assert (
        render.job_message(JobStatus.PROVISIONING, None, None, provisioning_for=long)
        == "waiting for capacity"
    )
    failed = (JobStatus.FAILED, R.CONTAINER_EXITED_WITH_ERROR, 1)
    assert render.job_message(*failed, run_status=RunStatus.PENDING) == "exited (1)"
    assert render.job_message(JobStatus.SUBMITTED, None, None, run_status=RunStatus.PENDING) == "retrying"


def run_record(status: str, reason: str | None = None, **fields: Any) -> RunRecord:
    return RunRecord(
        id="r-1", project="main", run_name="r", user="u", type="task", status=status,
        termination_reason=reason, workflow_id="ferry/main/r", **fields,
    )  # fmt: skip


def job_record(
    job: int, status: str, reason: str | None, exit_status: int | None = None, **fields: Any
) -> JobSubmissionRecord:
    return JobSubmissionRecord(
        id=f"r-1-r0-j{job}-s0", run_id="r-1", job_num=job, status=status, termination_reason=reason,
        exit_status=exit_status, **fields,
    )  # fmt: skip


def test_final_lines() -> None:
    done = run_record("done", "all_jobs_done")
    assert (
        render.final_line(done, [job_record(0, "done", "done_by_runner", 0)]) == "run r: done (all jobs done)"
    )
    failed = run_record("failed", "job_failed")
    jobs = [
        job_record(0, "done", "done_by_runner", 0),
        job_record(1, "failed", "container_exited_with_error", 3),
    ]
    assert render.final_line(failed, jobs) == "run r: failed (job failed): node 1 exited (3)"
    # The node the run stopped because node 1 failed is not the cause: the failed one is named.
    jobs[0] = job_record(0, "terminated", "terminated_by_server", termination_message="stopped by the run")
    assert render.final_line(failed, jobs) == "run r: failed (job failed): node 1 exited (3)"
    no_room = job_record(
        0, "failed", "failed_to_start_due_to_no_capacity",
        termination_message="FAILED_TO_START_DUE_TO_NO_CAPACITY: local has too little (cpu 64 > 2)",
    )  # fmt: skip
    assert render.final_line(failed, [no_room]) == (
        "run r: failed (job failed): no capacity: local has too little (cpu 64 > 2)"
    )
    stopped = run_record("terminated", "stopped_by_user")
    jobs = [job_record(0, "terminated", "terminated_by_user", 143, termination_message="stopped by the run")]
    assert render.final_line(stopped, jobs) == "run r: terminated (stopped by user)"


def test_run_message() -> None:
    assert render.run_message(run_record("pending"), []) == "retrying"
    assert render.run_message(run_record("failed", "retry_limit_exceeded"), []) == "retry limit exceeded"
    waiting = job_record(0, "provisioning", None, provisioned_at=0.0)
    assert render.run_message(run_record("provisioning"), [waiting], now=100.0) == "waiting for capacity"


def test_latest_jobs_keep_the_last_submission() -> None:
    first = job_record(0, "failed", "container_exited_with_error", 1)
    second = first.model_copy(update={"id": "r-1-r0-j0-s1", "submission_num": 1, "status": "running"})
    assert render.latest_jobs([first, second]) == [second]


def test_event_line() -> None:
    event = Event(timestamp=0.0, name="finish", context={"status": 3, "note": "two words"})
    line = render.event_line(event)
    assert line.split("  ")[1:] == ["finish", 'status=3 note="two words"']
    assert render.event_line(Event(timestamp=0.0, name="free")).endswith("  free")


def test_ago() -> None:
    assert [render.ago(t, now=100_000.0) for t in (99_999.0, 99_000.0, 90_000.0, 0.0, None)] == [
        "1s ago", "16m ago", "2h ago", "1d ago", "",
    ]  # fmt: skip


def test_a_job_queued_in_its_fleet_is_waiting_for_capacity() -> None:
    queued = job_record(0, "submitted", None, status_message="waiting for capacity")
    assert render.job_record_message(queued, run_record("submitted")) == "waiting for capacity"
    # A pending run's message says why it waits: it is retrying, not queued.
    assert render.job_record_message(queued, run_record("pending")) != "waiting for capacity"


def test_a_runs_resources_as_its_plan_showed_them() -> None:
    task = '{"type": "task", "commands": ["x"], "resources": {"cpu": 3}}'
    assert render.resources_of(run_record("running", configuration=task)).startswith("cpu=3 ")
    grouped = (
        '{"type": "task", "groups": [{"name": "head", "commands": ["x"], "resources": {"cpu": 1}},'
        ' {"nodes": 2, "commands": ["y"], "resources": {"cpu": 4}}]}'
    )
    shown = render.resources_of(run_record("running", configuration=grouped))
    assert shown.startswith("head: cpu=1 ") and "; 1: cpu=4 " in shown  # each node group's, not the task's
