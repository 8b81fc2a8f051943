"""What Temporal's Web UI shows of a run and a job (docs/runs.md#the-web-ui): the one-line summary and the
details given at a workflow's start (its user metadata), the current details the workflow keeps, and the
message a workflow fails with when its run or job ends FAILED.

Pure text: the workflows and the CLI pass it to Temporal (workflows/endings.py, cli/api.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.configuration import RunConfiguration
from core.jobs.state_machine import JobState
from core.jobs.transitions import last_note
from core.runs.run_state import RunJob, RunState
from core.runs.status_words import status_message
from core.runs.workflow_messages import RunInput
from core.services.replicas import service_path
from core.status import JobStatus, JobTerminationReason, RunStatus
from core.wire.job_messages import JobInput
from core.wire.run_messages import PipelineInput

# The ApplicationError types a FAILED run's (or pipeline's) and a FAILED job's workflow fails with.
RUN_FAILED = "RunFailed"
JOB_FAILED = "JobFailed"

_JOBS_SHOWN = 10  # a service of many replicas: its details list the first jobs, then how many more
_EXITED = (JobTerminationReason.DONE_BY_RUNNER, JobTerminationReason.CONTAINER_EXITED_WITH_ERROR)


def run_summary(run_name: str, configuration: RunConfiguration) -> str:
    """`task train: nodes 2; cpu=2.. mem=8GB.. disk=100GB..`: the run's one line in the Web UI."""
    summary = configuration.summary()
    return f"{summary.type} {run_name}: {summary.scale}; {summary.resources}"


def run_metadata(inp: RunInput, service_url: str | None = None) -> tuple[str, str]:
    """The run's summary and its fixed details (Temporal markdown): who, what, where a service answers."""
    summary = inp.configuration.summary()
    lines = [
        _whose(inp.run_name, inp.configuration.type, inp.project, inp.user, inp.run_id),
        f"**scale** {summary.scale}; **resources** {summary.resources}",
        f"**retry** {summary.retry}",
    ]
    if inp.configuration.schedule is not None:
        lines.append(f"**schedule** {summary.schedule} (UTC)")
    if service_url is not None:
        lines.append(f"**service** {service_url}")
    lines.append(_commands(inp.run_name))
    return run_summary(inp.run_name, inp.configuration), _markdown(lines)


def pipeline_summary(run_name: str, tasks: int) -> str:
    return f"pipeline {run_name}: {tasks} tasks"


def pipeline_metadata(inp: PipelineInput) -> tuple[str, str]:
    tasks = [f"**task {n}** {run_summary(inp.run_name, task)}" for n, task in enumerate(inp.tasks, start=1)]
    whose = _whose(inp.run_name, "pipeline", inp.project, inp.user, inp.run_id)
    return pipeline_summary(inp.run_name, len(inp.tasks)), _markdown([whose, *tasks, _commands(inp.run_name)])


def _whose(run_name: str, kind: str, project: str, user: str, run_id: str) -> str:
    return f"**run** `{run_name}` ({kind}) of project `{project}`, by `{user}`, id `{run_id}`"


def _commands(run_name: str) -> str:
    return f"**ferry** `ferry logs {run_name}`, `ferry events {run_name}`"


def run_line(state: RunState) -> str:
    """`failed (job failed): job 0 exited (3)`, `running`, `pending (retrying)`: the run's status, why,
    and for a failed run the job that explains it."""
    message = status_message(state)
    line = state.status.value + (f" ({message})" if message else "")
    if state.status == RunStatus.FAILED and not state.tasks:
        failed = next((job for job in state.jobs if job.status == JobStatus.FAILED), None)
        if failed is not None:
            line += f": {_job_label(failed, state.jobs)} {_job_words(failed)}"
    return line


def run_current_details(state: RunState, summary: str) -> str:
    """What the run's workflow shows as its current details: its summary again (a run continued as new
    keeps no user metadata of its start), its status line, its jobs, and a service's path."""
    lines = [summary, f"**status** {run_line(state)}"]
    jobs = list(state.jobs)
    lines += [f"**{_job_label(job, jobs)}** {_job_words(job)}" for job in jobs[:_JOBS_SHOWN]]
    if len(jobs) > _JOBS_SHOWN:
        lines.append(f"and {len(jobs) - _JOBS_SHOWN} more jobs")
    if state.run_type == "service":
        lines.append(f"**service** {service_path(state.project, state.run_name)} on Ferry's proxy")
    return _markdown(lines)


def job_summary(inp: JobInput, run_type: str) -> str:
    """`task train: replica 0, job 1, submission 0`: a job submission's one line in the Web UI."""
    where = f"replica {inp.replica_num}, job {inp.job_num}, submission {inp.submission_num}"
    return f"{run_type} {inp.spec.run_name}: {where}"


def job_details(inp: JobInput) -> str:
    """A job submission's fixed details: its run, its node, what it reserves on its instance."""
    r = inp.resources
    return _markdown(
        [
            f"**run** id `{inp.run_id}`, node {inp.job_num} of {inp.nodes_num}",
            f"**reserves** cpu {r.cpu:g}, memory {r.memory:g} GB, gpu {r.gpu}",
        ]
    )


def job_line(state: JobState) -> str:
    """`failed (exited (3))`, `failed (executor error): no such image`, `running on local-0`."""
    line = state.status.value
    if state.termination_reason is not None:
        line += f" ({_reason_words(state.termination_reason, state.exit_status)})"
        note = last_note(state)
        if note and state.termination_reason not in _EXITED:
            line += f": {' '.join(note.split())}"
    elif state.instance is not None:
        line += f" on {state.instance}"
    return line


def _job_words(job: RunJob) -> str:
    if job.termination_reason is None:
        return job.status.value
    return _reason_words(job.termination_reason, job.exit_status)


def _reason_words(reason: JobTerminationReason, exit_status: int | None) -> str:
    if reason in _EXITED:
        if exit_status is None and reason == JobTerminationReason.DONE_BY_RUNNER:
            exit_status = 0
        return "exited" if exit_status is None else f"exited ({exit_status})"
    return reason.message()


def _job_label(job: RunJob, jobs: Sequence[RunJob]) -> str:
    several_replicas = any(other.replica_num != 0 for other in jobs)
    return f"replica {job.replica_num} job {job.job_num}" if several_replicas else f"job {job.job_num}"


def _markdown(lines: list[str]) -> str:
    """One item per line (a plain newline would join them into one paragraph)."""
    return "\n".join(f"- {line}" for line in lines)
