"""`ferry wait RUN [--status S | --event NAME] [--timeout DURATION]`, like `flux job wait-event`.

Exit codes (cli/exit_codes.py): 0 reached, 1 timed out, 2 can no longer happen (the run finished first),
3 no such run.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer

from cli import exit_codes, render
from cli.context import Context
from cli.errors import USAGE_EXIT, CommandError, say
from core.durations import parse_duration
from core.status import RunStatus

if TYPE_CHECKING:
    from store import RunRecord
    from store.run_reads import RunReads

REACHED, TIMED_OUT, IMPOSSIBLE = exit_codes.OK, exit_codes.FAILED, exit_codes.USAGE
POLL_INTERVAL = 0.1


def statuses_reached(store: RunReads, run: RunRecord) -> set[RunStatus]:
    """Every status the run's eventlog shows it in: submitted, then each `status` and `clean`."""
    reached = {RunStatus.SUBMITTED}
    for record in store.read_events(run.id, None):
        status = record.context_data().get("status") if record.name in ("status", "clean") else None
        if isinstance(status, str) and status in RunStatus._value2member_map_:
            reached.add(RunStatus(status))
    return reached


def check(
    store: RunReads, run: RunRecord, status: RunStatus | None, event: str | None
) -> tuple[int | None, str]:
    """REACHED or IMPOSSIBLE with what to say, or None while it may still happen."""
    finished = RunStatus(run.status).is_finished()  # read before the events: a finished run's are all in
    if event is not None:
        for record in store.read_all_events(run.id):
            if record.name == event:
                found = record.to_event()
                return REACHED, render.event_line(found)
        return (
            IMPOSSIBLE if finished else None
        ), f"run {run.run_name} finished {run.status} without {event!r}"
    if status is None:
        return (REACHED if finished else None), f"run {run.run_name}: {run.status}"
    if finished:
        if run.status == status:
            return REACHED, f"run {run.run_name}: {run.status}"
        return IMPOSSIBLE, f"run {run.run_name} finished {run.status}, it can no longer be {status}"
    if status in statuses_reached(store, run):
        return REACHED, f"run {run.run_name}: {status}"
    return None, ""


def wait(run_name: str, *, status: RunStatus | None, event: str | None, timeout: str | None) -> int:
    if status is not None and event is not None:
        raise CommandError("--status and --event are exclusive: wait for one thing", USAGE_EXIT)
    try:
        limit = None if timeout is None else parse_duration(timeout)
    except ValueError as err:
        raise CommandError(f"--timeout: {err}", USAGE_EXIT) from None
    ctx = Context.from_env()
    store = ctx.runs().store  # through Ferry's API (docs/teams.md#runs)
    run = ctx.find_run(store, run_name)
    deadline = None if limit is None else time.monotonic() + limit
    while True:
        run = store.get_run(run.id) or run
        code, message = check(store, run, status, event)
        if code == REACHED:
            typer.echo(message)
            return REACHED
        if code == IMPOSSIBLE:
            say("ferry wait", message)
            return IMPOSSIBLE
        if deadline is not None and time.monotonic() >= deadline:
            say("ferry wait", f"timed out after {timeout}: run {run.run_name} is {run.status}")
            return TIMED_OUT
        time.sleep(
            POLL_INTERVAL if deadline is None else max(0.0, min(POLL_INTERVAL, deadline - time.monotonic()))
        )
