"""`ferry delete RUN [-y]`: forget a finished run (docs/cli.md#delete), through Ferry's API
(api/run_deletion.py); an active run is refused."""

from __future__ import annotations

import asyncio

import typer

from cli.context import Context, confirm
from cli.errors import RunActive
from core.status import RunStatus


def delete(run_name: str, *, yes: bool) -> int:
    ctx = Context.from_env()
    runs = ctx.runs()  # through Ferry's API (docs/teams.md#runs)
    run = ctx.find_run(runs.store, run_name)
    if RunStatus(run.status).is_active():
        raise RunActive(f"run {run.run_name} is {run.status}: stop it first (ferry stop {run.run_name})")
    if not confirm(f"Delete run {run.run_name} ({run.status}) with its logs and events?", yes=yes):
        return 1
    deleted = asyncio.run(runs.delete(run.id))
    # Temporal deletes an execution in the background, within seconds (longer on a busy server).
    typer.echo(
        f"run {run.run_name} deleted: {deleted.jobs} job(s); {deleted.executions} workflow execution(s) "
        "leaving Temporal",
        err=True,
    )
    return 0
