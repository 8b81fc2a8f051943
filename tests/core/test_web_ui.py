"""What the Web UI shows of runs and jobs (core/web_ui.py, docs/runs.md#the-web-ui): the status lines a
failed workflow fails with, and the details the workflows keep."""

from __future__ import annotations

from typing import Any

from core.configuration import parse_configuration
from core.eventlog import ExceptionRecord
from core.jobs.state_machine import JobState
from core.runs.run_state import RunJob, RunState
from core.runs.workflow_messages import RunInput
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from core.web_ui import job_line, pipeline_metadata, run_current_details, run_line, run_metadata
from core.wire.run_messages import PipelineInput

SMALL = {"cpu": "1..", "memory": "1GB..", "disk": "1GB.."}


def run_job(replica: int, job: int = 0, **fields: Any) -> RunJob:
    return RunJob(
        replica_num=replica, job_num=job, submission_num=0, first_submitted_at=0, submitted_at=0, **fields
    )


def run_state(status: RunStatus, *jobs: RunJob, **fields: Any) -> RunState:
    base: dict[str, Any] = {"run_name": "web", "project": "p", "user": "u", "run_type": "task"}
    return RunState(**{**base, **fields}, status=status, status_since=0, jobs=jobs)


def test_a_failed_run_names_the_job_that_failed_it() -> None:
    done = run_job(0, status=JobStatus.DONE, termination_reason=JobTerminationReason.DONE_BY_RUNNER)
    failed = run_job(
        1,
        status=JobStatus.FAILED,
        termination_reason=JobTerminationReason.CONTAINER_EXITED_WITH_ERROR,
        exit_status=2,
    )
    state = run_state(RunStatus.FAILED, done, failed, termination_reason=RunTerminationReason.JOB_FAILED)
    assert run_line(state) == "failed (job failed): replica 1 job 0 exited (2)"
    assert run_line(run_state(RunStatus.RUNNING, run_job(0))) == "running"


def test_current_details_list_the_jobs_and_a_services_path() -> None:
    jobs = [run_job(replica, status=JobStatus.RUNNING) for replica in range(12)]
    state = run_state(RunStatus.RUNNING, *jobs, run_type="service")
    lines = run_current_details(state, "service web: replicas 12").splitlines()
    assert lines[:3] == [
        "- service web: replicas 12",
        "- **status** running",
        "- **replica 0 job 0** running",
    ]
    assert lines[-2:] == ["- and 2 more jobs", "- **service** /proxy/services/p/web/ on Ferry's proxy"]
    assert len(lines) == 2 + 10 + 2


def test_a_failed_job_says_why_in_its_own_words() -> None:
    note = ExceptionRecord(timestamp=0, type="start", severity=0, note="no such\nimage")
    state = JobState(
        replica_num=0,
        job_num=0,
        submission_num=0,
        status=JobStatus.FAILED,
        termination_reason=JobTerminationReason.EXECUTOR_ERROR,
        exceptions=(note,),
    )
    assert job_line(state) == "failed (executor error): no such image"
    running = JobState(replica_num=0, job_num=0, submission_num=0, status=JobStatus.RUNNING, instance="h1")
    assert job_line(running) == "running on h1"


def test_metadata_of_a_scheduled_service_and_of_a_pipeline() -> None:
    conf = parse_configuration(
        {
            "type": "service",
            "commands": ["serve"],
            "port": 80,
            "resources": SMALL,
            "schedule": {"cron": "0 * * * *"},
        }
    )
    inp = RunInput(run_id="web-1", project="p", run_name="web", user="u", configuration=conf, submitted_at=0)
    summary, details = run_metadata(inp, "http://127.0.0.1:8300/proxy/services/p/web/")
    assert summary.startswith("service web: replicas 1; cpu=1..")
    assert "- **run** `web` (service) of project `p`, by `u`, id `web-1`" in details.splitlines()
    assert "- **service** http://127.0.0.1:8300/proxy/services/p/web/" in details.splitlines()
    assert any(line.startswith("- **schedule** 0 * * * *") for line in details.splitlines())
    task = parse_configuration({"type": "task", "commands": ["t"], "resources": SMALL})
    pipeline = PipelineInput(
        run_id="pipe-1", project="p", run_name="pipe", user="u", tasks=[task, task], fleets=[], submitted_at=0
    )
    summary, details = pipeline_metadata(pipeline)
    assert summary == "pipeline pipe: 2 tasks"
    assert "- **task 2** task pipe: nodes 1; cpu=1.. mem=1GB.. disk=1GB.." in details.splitlines()
