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
