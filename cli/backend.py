"""`ferry apply -f slurm.yml` (apply_backend) and `ferry backend list|delete`, docs/backends.md.

Applying a backend reads the login key it names, checks it once against the login node (Slurm answers,
and knows every partition the file lists: a wrong one is refused here with Slurm's own list), and records
the backend with its key sealed (store.backend_repository). Nothing needs Temporal.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cli.errors import FerryError, FerryGroup, one_line_errors
from cli.teams import PROJECT, use_project

if TYPE_CHECKING:
    from rich.table import Table

    from cli.context import Context
    from core.configuration import SlurmBackendConfiguration
    from core.configuration.loading import LoadedConfiguration

backend_app = typer.Typer(
    cls=FerryGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Backends: how fleets with `nodes` create instances (docs/backends.md). Add one with "
    "`ferry apply -f slurm.yml` (type: slurm).",
)  # fmt: skip


@backend_app.command("list")
@one_line_errors
def backend_list(
    as_json: bool = typer.Option(False, "--json", help="JSON, for scripts."), project: str | None = PROJECT
) -> None:
    """The project's backends: their type, login node and partitions."""
    from cli import render
    from cli.context import Context

    use_project(project)
    backends = Context.from_env().backends().listed()
    if as_json:
        typer.echo(json.dumps([backend.model_dump() for backend in backends], indent=2))
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in ("NAME", "TYPE", "WHERE"):
        table.add_column(column, no_wrap=True)
    for backend in backends:
        table.add_row(backend.name, backend.type, backend.where)
    render.console().print(table)


@backend_app.command("delete")
@one_line_errors
def backend_delete(
    name: str = typer.Argument(..., metavar="NAME", help="The backend's name.", show_default=False),
    yes: bool = typer.Option(False, "-y", "--yes", help="Do not ask for confirmation."),
    project: str | None = PROJECT,
) -> None:
    """Forget a backend and its sealed login key. Fleets that use it can create no more instances."""
    from cli.context import Context, confirm

    use_project(project)
    if not confirm(f"Delete backend {name}?", yes=yes):
        raise typer.Exit(1)
    Context.from_env().backends().delete(name)
    typer.echo(f"backend {name} deleted", err=True)


def apply_backend(loaded: LoadedConfiguration, *, yes: bool, name: str | None = None) -> int:
    """`ferry apply -f slurm.yml`: the backend checked against its login node and recorded."""
    from cli import render
    from cli.context import Context, confirm
    from core.configuration import SlurmBackendConfiguration

    configuration = loaded.configuration
    assert isinstance(configuration, SlurmBackendConfiguration)
    if name is not None:
        configuration = configuration.model_copy(update={"name": name})
    ctx = Context.from_env()
    console = render.console(stderr=True)
    console.print(plan_table(ctx, loaded.file, configuration))
    if not confirm("Apply the backend?", yes=yes):
        return 1
    key = _login_key(loaded.file, configuration)
    applied = asyncio.run(ctx.backends().apply(configuration, key))
    console.print(
        f"backend {applied.name} applied (partitions {', '.join(applied.partitions)})", highlight=False
    )
    return 0


def _login_key(file: str, configuration: SlurmBackendConfiguration) -> str:
    import asyncssh

    path = Path(configuration.login.identity_file).expanduser()
    if not path.is_absolute():
        path = Path(file).resolve().parent / path  # as the configuration's other paths
    try:
        text = path.read_text()
        asyncssh.import_private_key(text)
    except (OSError, ValueError, asyncssh.KeyImportError) as err:
        raise FerryError(f"{file}: login.identity_file: cannot read the key at {path}: {err}") from None
    return text


def plan_table(ctx: Context, file: str, configuration: SlurmBackendConfiguration) -> Table:
    from cli import render

    login = configuration.login
    jump = f" (through {login.proxy_jump.hostname})" if login.proxy_jump else ""
    return render.plan_table(
        [
            ("Project", ctx.project),
            ("Configuration", file),
            ("Type", "slurm backend"),
            ("Name", configuration.backend_name),
            ("Login node", f"{login.user}@{login.hostname}:{login.port}{jump}"),
            ("Partitions", configuration.summary().scale.split(": ", 1)[1]),
            ("Shared directory", configuration.directory),
        ]
    )
