"""`ferry ps`: runs with their jobs, through Ferry's API (docs/teams.md#runs); `-w` keeps the table live."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import typer
from rich.live import Live

from cli import render
from cli.context import Context
from cli.dev_environments import ASK_EVERY, DevView, dev_views, to_ask
from cli.pulls import pulling_jobs
from cli.services import ServiceView
from cli.stuck import StuckWorkflow
from store.run_reads import runs_with_jobs

if TYPE_CHECKING:
    from pathlib import Path

    from cli.remote_runs import RunsClient
    from core.wire.messages import SSHEndpoint
    from store import JobSubmissionRecord, RunRecord
    from store.run_reads import RunReads

WATCH_INTERVAL = 0.5
Runs = list[tuple["RunRecord", list["JobSubmissionRecord"]]]
Stuck = dict[str, StuckWorkflow]


def collect(store: RunReads, project: str, *, all_runs: bool, limit: int) -> Runs:
    """The table's runs with their jobs: in one request to the API (cli.remote_runs.RunReader), or read
    from the store by an operator's CLI."""
    in_one = getattr(store, "runs_with_jobs", None)
    if in_one is not None:
        rows: Runs = in_one(project, active_only=not all_runs, limit=limit)
        return rows
    return runs_with_jobs(store, project, active_only=not all_runs, limit=limit)


class LiveViews:
    """What a table shows beside the records, told by the API once per table (api/run_live.py); a dev
    environment's connections asked again only every ASK_EVERY seconds, each ask adding to its job's
    workflow history (docs/attach.md)."""

    def __init__(self, runs: RunsClient, home: Path) -> None:
        self._runs = runs
        self._home = home
        self._told: dict[str, tuple[float, SSHEndpoint | None]] = {}  # by job id: when asked, the answer

    def of(self, runs: Runs) -> tuple[dict[str, ServiceView], dict[str, DevView], dict[str, str], Stuck]:
        from api.messages import LiveAsk

        now = time.monotonic()
        stale = [
            job.id
            for _, job in to_ask(runs)
            if now - self._told.get(job.id, (-ASK_EVERY, None))[0] >= ASK_EVERY
        ]
        ask = LiveAsk(
            runs=[run.id for run, _ in runs],
            connections=stale,
            pulls=[job.id for _, job in pulling_jobs(runs)],
        )
        news = self._runs.live(ask)
        self._told.update({job_id: (now, news.connections.get(job_id)) for job_id in stale})
        told = {job_id: answer for job_id, (_, answer) in self._told.items()}
        return news.services, dev_views(runs, self._home, told), news.pulls, news.stuck


def ps(*, all_runs: bool, watch: bool, as_json: bool, limit: int, wide: bool = False) -> None:
    ctx = Context.from_env()
    api = ctx.runs()  # through Ferry's API (docs/teams.md#runs)
    store = api.store
    views = LiveViews(api, ctx.settings.home)

    def current() -> tuple[Runs, dict[str, ServiceView], dict[str, DevView], dict[str, str], Stuck]:
        runs = collect(store, ctx.project, all_runs=all_runs, limit=limit)
        return runs, *views.of(runs)

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
