"""What the CLI shows of runs, jobs and events: the status messages (pure), tables, lines and JSON."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from cli.arrays import array_size, element_counts, element_label
from cli.tables import Column, FittedTable, Row
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason

if TYPE_CHECKING:
    from cli.dev_environments import DevView
    from cli.services import ServiceView
    from cli.stuck import StuckWorkflow
    from core.eventlog import Event
    from store import JobSubmissionRecord, RunRecord

# A job provisioning longer than this is waiting for its instance to have room (the agent refused it).
CAPACITY_PATIENCE = 3.0
STUCK = "stuck"  # a run's status in `ferry ps` while its workflow cannot go on (cli/stuck.py)
# A piped console's width: no table row is ever that long, so none wraps (docs/cli.md#tables).
UNLIMITED_WIDTH = 100_000

_REASON_WORDS: dict[JobTerminationReason, str] = {
    JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY: "no capacity",
    JobTerminationReason.INSTANCE_UNREACHABLE: "interrupted",
    JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY: "interrupted",
    JobTerminationReason.TERMINATED_BY_USER: "stopped",
    JobTerminationReason.ABORTED_BY_USER: "aborted",
}


def job_message(
    status: JobStatus,
    reason: JobTerminationReason | None,
    exit_status: int | None,
    *,
    run_status: RunStatus | None = None,
    provisioning_for: float = 0.0,
) -> str:
    """`ferry ps`'s message for a job: `exited (N)`, `no capacity`, `interrupted`, `stopped`, `aborted`,
    `retrying`, `waiting for capacity`, or else its status."""
    if reason is not None and (status.is_finished() or status == JobStatus.TERMINATING):
        if reason in (JobTerminationReason.DONE_BY_RUNNER, JobTerminationReason.CONTAINER_EXITED_WITH_ERROR):
            code = exit_status if exit_status is not None else (0 if status == JobStatus.DONE else None)
            return "exited" if code is None else f"exited ({code})"
        return _REASON_WORDS.get(reason) or reason.message()
    if run_status == RunStatus.PENDING:
        return "retrying"
    if status == JobStatus.PROVISIONING and provisioning_for >= CAPACITY_PATIENCE:
        return "waiting for capacity"
    return status.value


def job_record_message(job: JobSubmissionRecord, run: RunRecord, now: float | None = None) -> str:
    now = time.time() if now is None else now
    status = JobStatus(job.status)
    if status == JobStatus.SUBMITTED and job.status_message and run.status != RunStatus.PENDING:
        return job.status_message  # "waiting for capacity": queued in its fleet
    if status == JobStatus.RUNNING and job.status_message:
        return job.status_message  # "ports 8000->41234": published by its container
    since = job.provisioned_at if job.provisioned_at is not None else job.submitted_at
    return job_message(
        status,
        JobTerminationReason(job.termination_reason) if job.termination_reason else None,
        job.exit_status,
        run_status=RunStatus(run.status),
        provisioning_for=now - since if status == JobStatus.PROVISIONING else 0.0,
    )


def latest_jobs(jobs: Sequence[JobSubmissionRecord]) -> list[JobSubmissionRecord]:
    """The latest submission of each (replica, job), in order."""
    latest: dict[tuple[int, int], JobSubmissionRecord] = {}
    for job in jobs:
        key = (job.replica_num, job.job_num)
        if key not in latest or job.submission_num > latest[key].submission_num:
            latest[key] = job
    return [latest[key] for key in sorted(latest)]


def decisive_job(jobs: Sequence[JobSubmissionRecord]) -> JobSubmissionRecord | None:
    """The job that explains how a run ended: the first that failed (its siblings were then terminated by
    the run: not the cause), else the first that did not end done, else the first."""
    latest = latest_jobs(jobs)
    ended = [job for job in latest if JobStatus(job.status).is_finished() and job.status != JobStatus.DONE]
    failed = [job for job in ended if job.status == JobStatus.FAILED]
    return next(iter(failed or ended or latest), None)


def run_message(run: RunRecord, jobs: Sequence[JobSubmissionRecord], now: float | None = None) -> str:
    # The run's own message, as core.runs.status_words.status_message derives it: "next at ...",
    # "waiting for prep to be done", "task 2 of 3", why a dependency failed, the termination reason...
    if run.status_message:
        return run.status_message
    if RunStatus(run.status) == RunStatus.PENDING:
        return "retrying"
    if run.termination_reason:
        return RunTerminationReason(run.termination_reason).value.replace("_", " ")
    messages = [job_record_message(job, run, now) for job in latest_jobs(jobs)]
    waiting = [m for m in messages if m.startswith("waiting for capacity")]
    return waiting[0] if waiting else ""


def final_line(run: RunRecord, jobs: Sequence[JobSubmissionRecord]) -> str:
    """`run NAME: done (all jobs done)`, `run NAME: failed (job failed): exited (3)`..."""
    line = f"run {run.run_name}: {run.status}"
    if run.termination_reason:
        line += f" ({RunTerminationReason(run.termination_reason).value.replace('_', ' ')})"
    if run.termination_reason == RunTerminationReason.DEPENDENCY_FAILED and run.status_message:
        return f"{line}: {run.status_message}"
    job = decisive_job(jobs)
    by_user = run.termination_reason is not None and RunTerminationReason(run.termination_reason).is_by_user
    if job is None or run.status == RunStatus.DONE or by_user:
        return line
    message = job_record_message(job, run)
    latest = latest_jobs(jobs)
    label = job_label(job.replica_num, job.job_num, *label_shape(run, latest)) if len(latest) > 1 else ""
    label = element_label(job) if array_size(run) else label
    message = f"{label} {message}".strip()
    line += f": {message}"
    reason = JobTerminationReason(job.termination_reason) if job.termination_reason else None
    quiet = (
        JobTerminationReason.CONTAINER_EXITED_WITH_ERROR,
        JobTerminationReason.DONE_BY_RUNNER,
        JobTerminationReason.TERMINATED_BY_USER,
        JobTerminationReason.ABORTED_BY_USER,
    )
    if job.termination_message and reason not in quiet:
        line += f": {note(job)}"
    return line


def note(job: JobSubmissionRecord) -> str:
    """The job's termination message on one line, without the `REASON_NAME: ` an activity error adds."""
    text = " ".join((job.termination_message or "").split())
    if job.termination_reason:
        text = text.removeprefix(f"{JobTerminationReason(job.termination_reason).name}: ")
    return text


def label_shape(run: RunRecord, jobs: Sequence[JobSubmissionRecord]) -> tuple[bool, bool]:
    """Whether a run's jobs are told apart by replica (a service's always), and by node."""
    replicas = {job.replica_num for job in jobs}
    nodes = {job.job_num for job in jobs}
    return run.type == "service" or len(replicas) > 1, len(nodes) > 1


def job_label(replica: int, job: int, by_replica: bool, by_node: bool) -> str:
    """`replica 1`, `node 0`, `replica 1 node 0`; "" for a run's only job."""
    words = [f"replica {replica}"] if by_replica else []
    return " ".join([*words, *([f"node {job}"] if by_node else [])])


def ago(timestamp: float | None, now: float | None = None) -> str:
    if timestamp is None:
        return ""
    seconds = max(0.0, (time.time() if now is None else now) - timestamp)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


def resources_of(run: RunRecord) -> str:
    try:
        from core.configuration import FleetConfiguration, VolumeConfiguration, parse_configuration

        configuration = parse_configuration(run.configuration_data())
        if isinstance(configuration, VolumeConfiguration | FleetConfiguration):
            return "" if isinstance(configuration, VolumeConfiguration) else configuration.resources.pretty()
        return configuration.summary().resources  # as the plan showed it: a node group's each (docs/runs.md)
    except ValueError:
        return ""


def console(*, stderr: bool = False) -> Console:
    """A console as wide as the terminal, or COLUMNS; piped with no COLUMNS, of no width limit: a table's
    row is one line of plain text there, for scripts and logs (docs/cli.md#tables)."""
    out = Console(stderr=stderr)
    if out.is_terminal or os.environ.get("COLUMNS", "").strip().isdigit():  # rich reads COLUMNS itself
        return out
    return Console(stderr=stderr, width=UNLIMITED_WIDTH)


RUN_COLUMNS = (
    Column("NAME"),
    Column("JOB"),
    Column("SUB", wide=True),
    Column("STATUS"),
    Column("MESSAGE", flexible=True),
    Column("RESOURCES", optional=1, flexible=True),
    Column("INSTANCE", optional=3),
    Column("SUBMITTED", optional=2),
)


def runs_table(
    runs: Sequence[tuple[RunRecord, list[JobSubmissionRecord]]],
    services: Mapping[str, ServiceView] | None = None,
    devs: Mapping[str, DevView] | None = None,
    pulls: Mapping[str, str] | None = None,
    stuck: Mapping[str, StuckWorkflow] | None = None,
    *,
    wide: bool = False,
    now: float | None = None,
) -> FittedTable:
    """The runs and their latest jobs; a service's URL and a dev environment's IDE link under its row, its
    replicas' probe state, its job whether someone is attached or when inactivity stops it; a pulling job
    how far its image pull is (`pulls`, by job id: cli/pulls.py); a failed job's error under its row; a
    run whose workflow cannot go on `stuck`, why and since when (`stuck`, by run id: cli/stuck.py)."""
    services = services or {}
    devs = devs or {}
    pulls = pulls or {}
    stuck = stuck or {}
    rows: list[Row] = []
    now = time.time() if now is None else now
    for run, jobs in runs:
        service = services.get(run.id)
        notes = []
        if service is not None and service.url and RunStatus(run.status).is_active():
            notes.append(f"url: {service.url}")
        dev = devs.get(run.id)
        if dev is not None and dev.link is not None:
            notes.append(f"ide: {dev.link}")
        status, message = run.status, run_message(run, jobs, now)
        if run.id in stuck:
            status, message = STUCK, stuck[run.id].message()
        cells = (run.run_name, "", "", status, message, resources_of(run))
        rows.append(Row((*cells, "", ago(run.submitted_at, now)), notes))
        latest = latest_jobs(jobs)
        shape = label_shape(run, latest)
        size = array_size(run)
        if size and not wide:  # an array is one row of counts; -v lists its elements
            counts = element_counts(latest, size, finished=RunStatus(run.status).is_finished())
            rows.append(Row(("", f"array {size}", "", "", counts, "", "", "")))
            continue
        for job in latest:
            job_message = job_record_message(job, run, now)
            if service is not None and job.id in service.replicas and job.status == JobStatus.RUNNING:
                # Its state in the proxies, and where its port is published: "ready 1/1, ports 8000->...".
                job_message = ", ".join(filter(None, [service.replicas[job.id], job.status_message]))
            if dev is not None and dev.job_id == job.id:
                job_message = dev.ssh_message(now) or job_message  # "attached", "idle: stops in 4m 10s"
            job_message = pulls.get(job.id, job_message)  # "pulling IMAGE: 2/5 layers, 12.3/27.0 MB"
            error = note(job) if job.status == JobStatus.FAILED else ""
            label = element_label(job) if size else job_label(job.replica_num, job.job_num, *shape) or "job"
            cells = ("", label, str(job.submission_num), job.status, job_message, "")
            rows.append(
                Row(
                    (*cells, job.instance_name or "", ago(job.submitted_at, now)),
                    [f"error: {error}"] if error else [],
                )
            )
    return FittedTable(RUN_COLUMNS, rows, wide=wide)


def runs_json(
    runs: Sequence[tuple[RunRecord, list[JobSubmissionRecord]]],
    services: Mapping[str, ServiceView] | None = None,
    devs: Mapping[str, DevView] | None = None,
    pulls: Mapping[str, str] | None = None,
    stuck: Mapping[str, StuckWorkflow] | None = None,
) -> list[dict[str, Any]]:
    now = time.time()
    services = services or {}
    devs = devs or {}
    pulls = pulls or {}
    stuck = stuck or {}
    return [
        {
            "id": run.id,
            "name": run.run_name,
            "project": run.project,
            "user": run.user,
            "type": run.type,
            "status": run.status,
            "message": run_message(run, jobs, now),
            "termination_reason": run.termination_reason,
            "resources": resources_of(run),
            "submitted_at": run.submitted_at,
            "finished_at": run.finished_at,
            **({"url": services[run.id].url} if run.id in services else {}),
            **({"ide_link": devs[run.id].link} if run.id in devs and devs[run.id].link else {}),
            **({"stuck": _stuck_json(stuck[run.id])} if run.id in stuck else {}),
            "jobs": [
                {
                    "id": job.id,
                    "replica": job.replica_num,
                    "job": job.job_num,
                    "submission": job.submission_num,
                    "status": job.status,
                    "message": job_record_message(job, run, now),
                    "termination_reason": job.termination_reason,
                    "termination_message": job.termination_message,
                    "exit_status": job.exit_status,
                    "instance": job.instance_name,
                    "submitted_at": job.submitted_at,
                    "finished_at": job.finished_at,
                    **({"serving": services[run.id].replicas.get(job.id)} if run.id in services else {}),
                    **({"inactivity": devs[run.id].json()} if _asked(devs, run.id, job.id) else {}),
                    **({"pull": pulls[job.id]} if job.id in pulls else {}),
                }
                for job in jobs
            ],
        }
        for run, jobs in runs
    ]


def _stuck_json(workflow: StuckWorkflow) -> dict[str, Any]:
    return {"workflow_id": workflow.workflow_id, "since": workflow.since, "reason": workflow.reason}


def _asked(devs: Mapping[str, DevView], run_id: str, job_id: str) -> bool:
    """Whether the job is a dev environment's whose agent told its SSH connections."""
    dev = devs.get(run_id)
    return dev is not None and dev.job_id == job_id and dev.asked


def event_line(event: Event, label: str = "") -> str:
    """`2025-01-31 12:00:00.123  [label]  name  key=value ...`: an event for people."""
    when = datetime.fromtimestamp(event.timestamp)
    stamp = when.strftime("%Y-%m-%d %H:%M:%S") + f".{when.microsecond // 1000:03d}"
    line = "  ".join([stamp, *([label] if label else []), event.name])
    words = [f"{key}={_value(value)}" for key, value in event.context.items()]
    return f"{line}  {' '.join(words)}" if words else line


def _value(value: Any) -> str:
    if isinstance(value, str) and value and not any(c.isspace() for c in value):
        return value
    return json.dumps(value, separators=(",", ":"))


def plan_table(rows: Sequence[tuple[str, str]]) -> Table:
    """`ferry apply`'s plan: one bold key and its value per row."""
    table = Table(box=None, show_header=False, pad_edge=False, title="Plan", title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, value)
    return table
