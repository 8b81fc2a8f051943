"""`ferry ps`: runs with their jobs, from the store; `-w` keeps the table live."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import typer
from rich.live import Live

from cli import render
from cli.context import Context
from cli.dev_environments import DevEnvironments, DevView
from cli.pipeline_tasks import task_run
from cli.pulls import Pulls
from cli.services import ServiceView, service_views
from cli.stuck import StuckRuns, StuckWorkflow

if TYPE_CHECKING:
    from store import JobSubmissionRecord, RunRecord, Store

WATCH_INTERVAL = 0.5
Runs = list[tuple["RunRecord", list["JobSubmissionRecord"]]]
Stuck = dict[str, StuckWorkflow]


def collect(store: Store, project: str, *, all_runs: bool, limit: int) -> Runs:
    runs = store.list_runs(project, active_only=not all_runs, limit=limit)
    # A pipeline shows its latest task's jobs (docs/pipelines.md): its own run has none.
    return [(run, store.list_job_submissions(task_run(store, run, None).id)) for run in runs]


def ps(*, all_runs: bool, watch: bool, as_json: bool, limit: int, wide: bool = False) -> None:
    ctx = Context.from_env()
    connection = ctx.connection()  # runs move on only while the stack is up
    store = ctx.store()
    devs = DevEnvironments(ctx.settings.home, connection)
    pulls = Pulls(connection)
    stuck = StuckRuns(connection)

    def current() -> tuple[Runs, dict[str, ServiceView], dict[str, DevView], dict[str, str], Stuck]:
        runs = collect(store, ctx.project, all_runs=all_runs, limit=limit)
        records = [run for run, _ in runs]
        views = service_views(store, records), devs.views(runs), pulls.lines(runs)
        return runs, *views, stuck.of(records)

    if as_json:
        typer.echo(json.dumps(render.runs_json(*current()), indent=2))
        return
    console = render.console()
    if not watch:
        console.print(render.runs_table(*current(), wide=wide))
        return
    try:
        if console.is_terminal:
            with Live(console=console, auto_refresh=False) as live:
                while True:
                    live.update(render.runs_table(*current(), wide=wide), refresh=True)
                    time.sleep(WATCH_INTERVAL)
        shown = ""
        while True:  # piped: a new table only when a status or message changed, not the ages
            shown_now = current()
            key = json.dumps(render.runs_json(*shown_now))
            if key != shown:
                console.print(render.runs_table(*shown_now, wide=wide))
                shown = key
            time.sleep(WATCH_INTERVAL)
    except KeyboardInterrupt:
        return
