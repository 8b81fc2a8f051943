"""`ferry stop RUN [-x] [-y]`: stop (or abort) a run through Ferry's API, then wait until it has finished; a
stuck run is stopped from outside (docs/upgrades.md#stopping-a-stuck-run)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import typer

from cli import render
from cli.context import Context, confirm
from core.status import RunStatus

if TYPE_CHECKING:
    from cli.remote_runs import RunsClient
    from store import RunRecord

POLL_INTERVAL = 0.1


def stop(run_name: str, *, abort: bool, yes: bool) -> int:
    ctx = Context.from_env()
    runs = ctx.runs()
    run = ctx.find_run(runs.store, run_name)
    if RunStatus(run.status).is_finished():
        typer.echo(f"run {run.run_name} has already finished: {run.status}", err=True)
        return 0
    if not confirm(f"{'Abort' if abort else 'Stop'} run {run.run_name}?", yes=yes):
        return 1
    return asyncio.run(_stop(runs, run, abort=abort))


async def _stop(api: RunsClient, run: RunRecord, *, abort: bool) -> int:
    reply = await api.stop(run.run_name, abort=abort)
    console = render.console(stderr=True)
    doing = "aborted" if abort else "stopped"
    if reply.stuck is not None:  # docs/upgrades.md#stopping-a-stuck-run
        said = f"run {run.run_name}: {doing} from outside, its {reply.stuck}"
    else:
        said = f"run {run.run_name}: {'aborting' if abort else 'stopping'}"
    console.print(said, highlight=False, markup=False, soft_wrap=True)
    while True:
        current = await asyncio.to_thread(api.store.get_run, run.id)
        if current is not None and RunStatus(current.status).is_finished():
            jobs = await asyncio.to_thread(api.store.list_job_submissions, run.id)
            console.print(render.final_line(current, jobs), highlight=False, markup=False, soft_wrap=True)
            return 0
        await asyncio.sleep(POLL_INTERVAL)
