"""`ferry schedule pause|resume|trigger RUN`: a scheduled run's Temporal Schedule (docs/schedules.md).

The schedule is the run's (created when it starts, deleted when it ends); these reach it through the
Temporal client. The same is at hand in the Temporal Web UI, under Schedules.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import typer

from cli.errors import CommandError, FerryGroup, one_line_errors
from core.status import RunStatus

if TYPE_CHECKING:
    from temporalio.client import ScheduleHandle

schedule_app = typer.Typer(
    cls=FerryGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="A scheduled run's schedule: pause it, resume it, or run a cycle now.",
)  # fmt: skip
RUN = typer.Argument(..., metavar="RUN", help="The scheduled run's name.", show_default=False)


async def _schedule(run_name: str) -> ScheduleHandle:
    from cli.context import Context
    from core.wire.workflow_ids import schedule_id

    ctx = Context.from_env()
    api = await ctx.api()
    record = await api.get_run(run_name)
    if RunStatus(record.status).is_finished():
        raise CommandError(f"run {run_name} has finished ({record.status}): its schedule is gone")
    configuration = record.run_configuration()
    if configuration is None or configuration.schedule is None:
        raise CommandError(f"run {run_name} has no schedule")
    return api.client.get_schedule_handle(schedule_id(record.workflow_id, record.id))


def _act(run_name: str, verb: str) -> None:
    async def act() -> None:
        handle = await _schedule(run_name)
        note = f"ferry schedule {verb}"
        if verb == "pause":
            await handle.pause(note=note)
        elif verb == "resume":
            await handle.unpause(note=note)
        else:
            await handle.trigger()

    asyncio.run(act())


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
