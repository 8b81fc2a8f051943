"""`ferry events RUN`: a run's eventlog (or one job's), for people or as JSON lines; `-f` follows it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer

from cli import render
from cli.context import Context
from cli.errors import CommandError
from cli.pipeline_tasks import task_run
from core.status import RunStatus

if TYPE_CHECKING:
    from store import RunRecord
    from store.run_reads import RunReads

POLL_INTERVAL = 0.1
FINAL_EVENT = "clean"


def events(
    run_name: str,
    *,
    replica: int | None,
    job: int | None,
    submission: int | None,
    follow: bool,
    as_json: bool,
    task: int | None = None,
) -> None:
    ctx = Context.from_env()
    store = ctx.runs().store  # through Ferry's API (docs/teams.md#runs)
    run = ctx.find_run(store, run_name)
    of_job = replica is not None or job is not None or submission is not None
    if task is not None or of_job:
        run = task_run(store, run, task)  # a pipeline's own log has no jobs: its task's has
    job_id: str | None = None
    after = -1
    try:
        while True:
            finished = RunStatus(_fresh(store, run).status).is_finished()
            if of_job and job_id is None:  # once found, followed even if the job is resubmitted
                job_id = _job_submission(store, run, replica or 0, job or 0, submission)
            new = [] if of_job and job_id is None else store.read_events(run.id, job_id, after)
            for record in new:
                event = record.to_event()
                typer.echo(event.to_json() if as_json else render.event_line(event))
                after = record.seq
            if not follow or any(r.name == FINAL_EVENT for r in new) or (finished and not new):
                break
            time.sleep(POLL_INTERVAL)
    except KeyboardInterrupt:  # the way to stop following
        return
    if of_job and job_id is None:
        what = f"replica {replica or 0} job {job or 0}"
        if submission is not None:
            what += f" submission {submission}"
        raise CommandError(f"run {run.run_name} has no {what}")


def _fresh(store: RunReads, run: RunRecord) -> RunRecord:
    return store.get_run(run.id) or run


def _job_submission(
    store: RunReads, run: RunRecord, replica: int, job: int, submission: int | None
) -> str | None:
    """The id of that submission of the job (the latest if None), if it exists yet."""
    found = [
        j
        for j in store.list_job_submissions(run.id)
        if (j.replica_num, j.job_num) == (replica, job) and submission in (None, j.submission_num)
    ]
    return found[-1].id if found else None
