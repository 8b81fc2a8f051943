"""`ferry schedule pause|resume|trigger RUN`: a scheduled run's Temporal Schedule (docs/schedules.md).

The schedule is the run's (created when it starts, deleted when it ends); these reach it through Ferry's
API as the logged-in user, or an operator's CLI through the Temporal client itself
(cli/run_tool_clients.py). The same is at hand in the Temporal Web UI, under Schedules.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import typer

from cli.errors import FerryGroup, one_line_errors

if TYPE_CHECKING:
    from api.run_tool_messages import ScheduleAction

schedule_app = typer.Typer(
    cls=FerryGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="A scheduled run's schedule: pause it, resume it, or run a cycle now.",
)  # fmt: skip
RUN = typer.Argument(..., metavar="RUN", help="The scheduled run's name.", show_default=False)


def _act(run_name: str, action: ScheduleAction) -> None:
    from cli.context import Context
    from cli.run_tool_clients import run_tools

    asyncio.run(run_tools(Context.from_env()).schedule(run_name, action))


@schedule_app.command("pause")
@one_line_errors
def schedule_pause(run: str = RUN) -> None:
    """No cycle starts until it is resumed (a cycle running now goes on)."""
    _act(run, "pause")
    typer.echo(f"run {run}: schedule paused", err=True)


@schedule_app.command("resume")
@one_line_errors
def schedule_resume(run: str = RUN) -> None:
    """Cycles start again at their cron times."""
    _act(run, "resume")
    typer.echo(f"run {run}: schedule resumed", err=True)


@schedule_app.command("trigger")
@one_line_errors
def schedule_trigger(run: str = RUN) -> None:
    """Start a cycle now (skipped if one is running)."""
    _act(run, "trigger")
    typer.echo(f"run {run}: cycle triggered (ferry ps shows it)", err=True)
