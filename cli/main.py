"""The `ferry` command line (typer)."""

from __future__ import annotations

import typer

app = typer.Typer(name="ferry", no_args_is_help=True, add_completion=False, help=__doc__)


@app.callback()
def _ferry() -> None:
    # A callback keeps typer in sub-command mode even while the app has a single command.
    pass


@app.command()
def validate(
    files: list[str] = typer.Argument(
        None, metavar="FILE", help="Configuration files to check.", show_default=False
    ),
    file_options: list[str] = typer.Option(
        None,
        "-f",
        "--file",
        metavar="FILE",
        help="A configuration file to check (repeatable).",
        show_default=False,
    ),
) -> None:
    """Check configuration files; exit 0 only if every one is valid."""
    from cli.validate import validate_files

    paths = [*(file_options or []), *(files or [])]
    if not paths:
        typer.echo("ferry validate: name at least one file (FILE... or -f FILE)", err=True)
        raise typer.Exit(2)
    raise typer.Exit(validate_files(paths))


@app.command()
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
        raise typer.Exit(2)
    try:
        asyncio.run(run_worker(settings))
        return
    except RuntimeError as err:
        problem = str(err)  # leave the except block first: the SDK's runtime must not outlive the error
    typer.echo(f"ferry worker: {problem}", err=True)
    raise typer.Exit(1)
