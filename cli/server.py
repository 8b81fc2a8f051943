"""`ferry server [start | stop | status | upgrade]`: the embedded stack, in the foreground or in the
background."""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

import typer
from rich.table import Table

from cli import exit_codes, render
from cli.context import Context
from cli.errors import CommandError
from embedded.stack import Stack, StackStatus

NOT_RUNNING_EXIT = exit_codes.NOT_FOUND  # 3, as LSB init scripts say "not running"
_WATCH_INTERVAL = 0.5


def _stack(ctx: Context) -> Stack:
    return Stack(ctx.settings.home)


def status_table(ctx: Context, status: StackStatus) -> Table:
    table = Table(box=None, show_header=False, pad_edge=False)
    for _ in range(5):
        table.add_column()
    for process in status.processes:
        detail = f"task queue {status.task_queue}" if process.name == "worker" else process.address or ""
        table.add_row(
            process.name,
            "[green]running[/]" if process.alive else "[red]stopped[/]",
            f"pid {process.pid}" if process.alive and process.pid else "",
            detail,
            process.log,
        )
    table.add_row("web ui", "", "", status.ui_url or "-", "")
    if status.metrics_url is not None:
        table.add_row("temporal metrics", "", "", status.metrics_url, "")
    if status.stuck_runs is not None:
        stuck = f"[red]{status.stuck_runs}[/] (`ferry ps` says why)" if status.stuck_runs else "0"
        table.add_row("stuck runs", "", "", stuck, "")
    table.add_row("store", "", "", _safe_url(ctx.settings.database_url), "")
    return table


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is shown as the user wrote it, minus nothing to hide
        return url


def print_status(ctx: Context, status: StackStatus) -> None:
    console = render.console()
    state = "running" if status.running else "not running"
    console.print(f"Ferry {status.version} stack of {status.home}: {state}", highlight=False)
    console.print(status_table(ctx, status))
    from cli.login_file import kept_login

    login = kept_login()
    if login is not None:  # `ferry server` is this machine's stack; a login sends the rest elsewhere
        console.print(
            f"note: logged in to {login[0]}, so run commands use that server's API, not this stack "
            "(docs/teams.md#this-machines-stack)",
            highlight=False,
        )
    elif not ctx.embedded:
        console.print(
            f"note: FERRY_TEMPORAL_ADDRESS={ctx.settings.temporal_address} is set, so commands use that "
            "server, not this stack",
            highlight=False,
        )


def start() -> None:
    ctx = Context.from_env()
    print_status(ctx, _stack(ctx).start())


def stop() -> None:
    ctx = Context.from_env()
    stopped = _stack(ctx).stop()
    typer.echo(f"stopped: {', '.join(stopped)}" if stopped else "the stack was not running")


def upgrade() -> int:
    """Replace the running stack's worker, agent, proxy and API with this release's; the runs go on."""
    from embedded.stack import StackNotRunning

    ctx = Context.from_env()
    stack = _stack(ctx)
    try:
        print_status(ctx, stack.upgrade(say=lambda line: typer.echo(line, err=True)))
    except StackNotRunning as err:
        typer.echo(f"ferry server upgrade: {err}", err=True)
        return NOT_RUNNING_EXIT
    return 0


def status(*, as_json: bool) -> int:
    ctx = Context.from_env()
    current = _stack(ctx).status()
    if current.running:
        current = current.model_copy(update={"stuck_runs": _stuck_runs(current)})
    if as_json:
        typer.echo(current.model_dump_json(indent=2))
    else:
        print_status(ctx, current)
    return 0 if current.running else NOT_RUNNING_EXIT


def _stuck_runs(status: StackStatus) -> int | None:
    """How many runs have a workflow Temporal flags for failing workflow tasks (docs/upgrades.md), asked of
    the stack's own Temporal (plain TCP on loopback, as its processes reach it); None if it cannot tell."""
    import asyncio

    from cli.stuck import count_stuck_runs
    from core.temporal_connection import TemporalConnection, temporal_namespace

    if status.address is None:
        return None
    connection = TemporalConnection(address=status.address, namespace=temporal_namespace(os.environ))
    try:
        return asyncio.run(count_stuck_runs(connection))
    except Exception:  # noqa: BLE001 — the status of the stack's processes is shown regardless
        return None


def foreground() -> int:
    """Run the stack until Ctrl-C or SIGTERM, then stop it; 1 if one of its processes died first."""
    ctx = Context.from_env()
    stack = _stack(ctx)
    if stack.is_running():
        raise CommandError(
            f"the stack of {ctx.settings.home} is already running in the background: `ferry server stop` it "
            "first, or use it as it is"
        )
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        print_status(ctx, stack.start())
        typer.echo("Ctrl-C stops it.", err=True)
        while not done.wait(_WATCH_INTERVAL):
            # Settled: during an upgrade (another terminal's) two workers run, and neither is dead.
            dead = [p for p in stack.settled_status().processes if not p.alive]
            if [p.name for p in dead] == ["agent"]:
                # Its jobs outlive it, and it re-adopts them: started again (docs/jobs.md#a-restarted-agent).
                typer.echo(f"ferry server: the agent exited (see {dead[0].log}); starting it again", err=True)
                stack.start()
                continue
            if dead:
                typer.echo(
                    f"ferry server: the {dead[0].name} exited (see {dead[0].log}); stopping the stack",
                    err=True,
                )
                code = 1
                break
    finally:
        stopped = stack.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    typer.echo(f"stopped: {', '.join(stopped)}" if stopped else "stopped")
    return code
