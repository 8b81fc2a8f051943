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

from cli.errors import FerryError, FerryGroup, NotFound, one_line_errors

if TYPE_CHECKING:
    from rich.table import Table

    from activities.slurm_backend import SlurmBackend
    from cli.context import Context
    from core.configuration import SlurmBackendConfiguration
    from core.configuration.loading import LoadedConfiguration
    from store import Store
    from store.keys import Keys

backend_app = typer.Typer(
    cls=FerryGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Backends: how fleets with `nodes` create instances (docs/backends.md). Add one with "
    "`ferry apply -f slurm.yml` (type: slurm).",
)  # fmt: skip


@backend_app.command("list")
@one_line_errors
def backend_list(as_json: bool = typer.Option(False, "--json", help="JSON, for scripts.")) -> None:
    """The project's backends: their type, login node and partitions."""
    from cli import render
    from cli.context import Context
    from core.configuration import SlurmBackendConfiguration

    ctx = Context.from_env()
    rows = []
    for record in ctx.store().list_backends(ctx.project):
        configuration = SlurmBackendConfiguration.model_validate(record.configuration_data())
        rows.append((record.name, record.type, configuration.summary().scale))
    if as_json:
        typer.echo(json.dumps([{"name": n, "type": t, "where": w} for n, t, w in rows], indent=2))
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in ("NAME", "TYPE", "WHERE"):
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    render.console().print(table)


@backend_app.command("delete")
@one_line_errors
def backend_delete(
    name: str = typer.Argument(..., metavar="NAME", help="The backend's name.", show_default=False),
    yes: bool = typer.Option(False, "-y", "--yes", help="Do not ask for confirmation."),
) -> None:
    """Forget a backend and its sealed login key. Fleets that use it can create no more instances."""
    from cli.context import Context, confirm

    ctx = Context.from_env()
    if not confirm(f"Delete backend {name}?", yes=yes):
        raise typer.Exit(1)
    if not ctx.store().delete_backend(ctx.project, name):
        raise NotFound(f"project {ctx.project} has no backend {name}")
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
    partitions = asyncio.run(_check(ctx, configuration, key))
    record_backend(ctx.store(), ctx.project, configuration, key)
    console.print(
        f"backend {configuration.backend_name} applied (partitions {', '.join(partitions)})", highlight=False
    )
    return 0


def record_backend(
    store: Store, project: str, configuration: SlurmBackendConfiguration, key: str, keys: Keys | None = None
) -> None:
    """The backend in the store, its login key sealed (store.backend_repository) with `keys` (this
    process's by default)."""
    from store.backend_repository import seal_backend
    from store.keys import process_keys

    record = seal_backend(
        keys or process_keys(), project, configuration.backend_name, configuration.type,
        configuration.model_dump_json(), key,
    )  # fmt: skip
    store.put_backend(record)


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


def login_only(configuration: SlurmBackendConfiguration, key: str) -> SlurmBackend:
    """The backend as the CLI reaches it: its login node only (no agent is sent), host keys checked as the
    worker's are (FERRY_SSH_KNOWN_HOSTS)."""
    from activities.slurm_backend import SlurmBackend
    from activities.ssh_config import DeployOptions
    from core.settings import Settings

    async def no_bundle(_: object) -> object:
        raise AssertionError("the CLI sends no agent")

    options = DeployOptions(known_hosts=Settings.from_env().ssh_known_hosts)
    return SlurmBackend(configuration.backend_name, configuration, key, options, no_bundle)  # type: ignore[arg-type]


def one_line(name: str, err: Exception) -> FerryError:
    """A backend's error as the CLI says it: once prefixed with the backend's name."""
    said = str(err)
    return FerryError(said if said.startswith(f"backend {name}:") else f"backend {name}: {said}")


async def _check(ctx: Context, configuration: SlurmBackendConfiguration, key: str) -> list[str]:
    """The partitions Slurm has that the backend lists; FerryError naming what is wrong."""
    from activities.slurm_backend import SlurmBackendError

    backend = login_only(configuration, key)
    try:
        said = await backend.slurm("sinfo", "-h", "-o", "%R")
    except SlurmBackendError as err:
        raise one_line(configuration.backend_name, err) from None
    finally:
        await backend.aclose()
    known = sorted(set(said.split()))
    missing = [p.name for p in configuration.partitions if p.name not in known]
    if missing:
        raise FerryError(
            f"backend {configuration.backend_name}: Slurm has no partition {', '.join(missing)} "
            f"(it has {', '.join(known) or 'none'})"
        )
    return [p.name for p in configuration.partitions]


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
