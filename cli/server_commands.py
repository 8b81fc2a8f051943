"""`ferry server [start | stop | status]` and `ferry worker`: the commands that run Ferry's own processes
(cli/server.py, worker/main.py), beside the run commands of cli/main.py."""

from __future__ import annotations

import typer

from cli import exit_codes
from cli.errors import FerryGroup, one_line_errors

server_app = typer.Typer(
    cls=FerryGroup, invoke_without_command=True, add_completion=False, pretty_exceptions_enable=False,
    help="The embedded stack: a Temporal dev server (with its Web UI), one worker and the local agent. "
    "Without a subcommand, runs it in the foreground until Ctrl-C.",
)  # fmt: skip


@one_line_errors
def worker() -> None:
    """Run a worker: Ferry's workflows and activities on task queue `ferry`, until SIGTERM.

    Connects to FERRY_TEMPORAL_ADDRESS (namespace FERRY_TEMPORAL_NAMESPACE) and the store at
    FERRY_DATABASE_URL (SQLite under FERRY_HOME by default); starts the local agent if none runs.
    """
    import asyncio

    from core.settings import Settings
    from worker.main import run_worker

    settings = Settings.from_env()
    if settings.temporal_address is None:
        typer.echo("ferry worker: set FERRY_TEMPORAL_ADDRESS (host:port of the Temporal server)", err=True)
        raise typer.Exit(exit_codes.USAGE)
    try:
        asyncio.run(run_worker(settings))
        return
    except RuntimeError as err:
        problem = str(err)  # leave the except block first: the SDK's runtime must not outlive the error
    code = exit_codes.FAILED
    if problem.startswith("Failed client connect"):
        from cli.errors import connect_problem

        problem, code = connect_problem(settings.temporal_address, problem), exit_codes.UNREACHABLE
    typer.echo(f"ferry worker: {problem}", err=True)
    raise typer.Exit(code)


@server_app.callback()
@one_line_errors
def server(context: typer.Context) -> None:
    if context.invoked_subcommand is None:
        from cli.server import foreground

        raise typer.Exit(foreground())


@server_app.command("start")
@one_line_errors
def server_start() -> None:
    """Start the stack in the background (if it is not running) and print its addresses."""
    from cli.server import start

    start()


@server_app.command("stop")
@one_line_errors
def server_stop() -> None:
    """Stop the background stack: the worker, then the dev server, then the agent."""
    from cli.server import stop as stop_server

    stop_server()


@server_app.command("upgrade")
@one_line_errors
def server_upgrade() -> None:
    """Replace the running stack's worker, agent, proxy and API with this Ferry's, without stopping its runs
    (docs/upgrades.md); exits 3 if the stack is not running."""
    from cli.server import upgrade

    raise typer.Exit(upgrade())


@server_app.command("status")
@one_line_errors
def server_status(as_json: bool = typer.Option(False, "--json", help="JSON, for scripts.")) -> None:
    """The stack's processes, addresses and Web UI URL; exits 3 if it is not running."""
    from cli.server import status

    raise typer.Exit(status(as_json=as_json))
