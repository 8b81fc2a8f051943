"""`ferry logs RUN`: a run's job logs, read through Ferry's API; `-f` follows them until the run finishes."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import TYPE_CHECKING

from cli.arrays import array_size
from cli.context import Context
from cli.errors import USAGE_EXIT, CommandError
from cli.follow import LogStream, follow_run
from cli.pipeline_tasks import task_run

if TYPE_CHECKING:
    from store import RunRecord
    from store.run_reads import RunReads
from core.durations import parse_duration


def parse_since(value: str | None) -> float | None:
    """`--since 5m`: the wall-clock time that far back."""
    if value is None:
        return None
    try:
        return time.time() - parse_duration(value)
    except ValueError as err:
        raise CommandError(f"--since: {err}", USAGE_EXIT) from None


def cycle_jobs(store: RunReads, run: RunRecord, cycle: int | None) -> set[tuple[int, int, int]] | None:
    """A scheduled run's logs are one cycle's (docs/schedules.md): the latest, or `--cycle N`; None (every
    submission) for any other run."""
    from core.runs.cycles import cycle_submissions

    configuration = run.run_configuration()
    scheduled = configuration is not None and configuration.schedule is not None
    if not scheduled:
        if cycle is not None:
            raise CommandError(f"--cycle: run {run.run_name} is not a scheduled run", USAGE_EXIT)
        return None
    rows = store.read_events(run.id, None)
    events = [r.to_event() for r in rows]
    _, keys = cycle_submissions(events, cycle)
    if cycle is not None and not keys:
        latest, _ = cycle_submissions(events, None)
        raise CommandError(f"--cycle {cycle}: run {run.run_name} has had cycles 1 to {latest}", USAGE_EXIT)
    return keys


def logs(
    run_name: str,
    *,
    follow: bool,
    replica: int | None,
    job: int | None,
    since: str | None,
    task: int | None = None,
    cycle: int | None = None,
) -> None:
    start = parse_since(since)
    ctx = Context.from_env()
    store = ctx.runs().store  # through Ferry's API (docs/teams.md#runs)
    run = task_run(store, ctx.find_run(store, run_name), task)
    if job is not None and replica is None and array_size(run):
        replica, job = job, 0  # an array's `--job N` is its element N, one job each (docs/runs.md#arrays)
    submissions = cycle_jobs(store, run, cycle)
    stream = LogStream(
        store, run, sys.stdout.buffer, replica=replica, job=job, since=start, submissions=submissions
    )
    if not follow:
        stream.poll(store.list_job_submissions(run.id))
        stream.close()
        return
    asyncio.run(follow_run(store, run, status_console=None, on_interrupt=lambda: False, logs=stream))
