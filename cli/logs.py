"""`ferry logs RUN`: a run's job logs from the store; `-f` follows them until the run finishes."""

from __future__ import annotations

import asyncio
import sys
import time

from cli.context import Context
from cli.errors import USAGE_EXIT, CommandError
from cli.follow import LogStream, follow_run
from cli.tasks import task_run
from core.configuration.durations import parse_duration


def parse_since(value: str | None) -> float | None:
    """`--since 5m`: the wall-clock time that far back."""
    if value is None:
        return None
    try:
        return time.time() - parse_duration(value)
    except ValueError as err:
        raise CommandError(f"--since: {err}", USAGE_EXIT) from None


def logs(
    run_name: str,
    *,
    follow: bool,
    replica: int | None,
    job: int | None,
    since: str | None,
    task: int | None = None,
) -> None:
    start = parse_since(since)
    ctx = Context.from_env()
    store = ctx.store()
    run = task_run(store, ctx.find_run(store, run_name), task)
    ctx.ensure_stack()  # the run moves on only while the stack is up
    stream = LogStream(store, run, sys.stdout.buffer, replica=replica, job=job, since=start)
    if not follow:
        stream.poll(store.list_job_submissions(run.id))
        stream.close()
        return
    asyncio.run(follow_run(store, run, status_console=None, on_interrupt=lambda: False, logs=stream))
