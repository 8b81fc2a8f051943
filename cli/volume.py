"""`ferry volume create|list|delete` and `ferry apply -f volume.yml` (apply_volume), docs/volumes.md.

Thin commands over cli.volume_clients: through Ferry's API as the logged-in user (docs/teams.md#volumes).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer

from cli.errors import FerryGroup, one_line_errors
from cli.teams import PROJECT, use_project

if TYPE_CHECKING:
    from rich.table import Table

    from api.messages import VolumeInfo
    from cli.context import Context
    from core.configuration import VolumeConfiguration
    from core.configuration.loading import LoadedConfiguration

volume_app = typer.Typer(
    cls=FerryGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Named volumes: a directory on one instance of a fleet, kept across runs and attached to one job "
    "at a time. Create one here or with `ferry apply -f volume.yml` (type: volume).",
)  # fmt: skip


@volume_app.command("create")
@one_line_errors
def volume_create(
    name: str = typer.Argument(..., metavar="NAME", help="The volume's name.", show_default=False),
    fleet: str | None = typer.Option(
        None, "--fleet", help="Its fleet (default: where a run without `fleets` goes).", show_default=False
    ),
    instance: str | None = typer.Option(
        None, "--instance", help="Its instance (default: the fleet's first).", show_default=False
    ),
    project: str | None = PROJECT,
) -> None:
    """Create a volume: its directory is made on its instance when a job first mounts it."""
    from pydantic import ValidationError

    use_project(project)
    from cli.context import Context
    from core.configuration import VolumeConfiguration

    try:
        configuration = VolumeConfiguration(name=name, fleet=fleet, instance=instance)
    except ValidationError as err:
        first = err.errors()[0]
        raise typer.BadParameter(str(first["msg"]).removeprefix("Value error, ")) from None
    typer.echo(_create(Context.from_env(), configuration), err=True)


def _create(ctx: Context, configuration: VolumeConfiguration, name: str | None = None) -> str:
    made = ctx.volumes().create(configuration, name)
    volume, word = made.volume, "created" if made.created else "unchanged"
    return f"volume {volume.name} {word} (fleet {volume.fleet}, instance {volume.instance})"


@volume_app.command("list")
@one_line_errors
def volume_list(
    as_json: bool = typer.Option(False, "--json", help="JSON, for scripts."), project: str | None = PROJECT
) -> None:
    """Volumes: their fleet and instance, and the job each is attached to."""
    from cli import render
    from cli.context import Context

    use_project(project)
    volumes = Context.from_env().volumes().listed()
    if as_json:
        typer.echo(json.dumps([volume_json(v) for v in volumes], indent=2))
        return
    render.console().print(volumes_table(volumes))


@volume_app.command("delete")
@one_line_errors
def volume_delete(
    name: str = typer.Argument(..., metavar="NAME", help="The volume's name.", show_default=False),
    yes: bool = typer.Option(False, "-y", "--yes", help="Do not ask for confirmation."),
    project: str | None = PROJECT,
) -> None:
    """Delete a volume that no job holds. Its directory stays on its instance, with its files."""
    from cli.context import Context, confirm

    use_project(project)
    if not confirm(f"Delete volume {name}?", yes=yes):
        raise typer.Exit(1)
    record = Context.from_env().volumes().delete(name)
    typer.echo(f"volume {name} deleted (its directory stays on instance {record.instance})", err=True)


def apply_volume(loaded: LoadedConfiguration, *, yes: bool, name: str | None = None) -> int:
    """`ferry apply -f volume.yml`: the volume created (or found unchanged)."""
    from cli import render
    from cli.context import Context, confirm
    from core.configuration import VolumeConfiguration

    configuration = loaded.configuration
    assert isinstance(configuration, VolumeConfiguration)
    ctx = Context.from_env()
    console = render.console(stderr=True)
    console.print(plan_table(ctx, loaded.file, configuration, name or configuration.name))
    if not confirm("Create the volume?", yes=yes):
        return 1
    console.print(_create(ctx, configuration, name), highlight=False)
    return 0


# --- what is shown ---------------------------------------------------------------------------------------


def plan_table(ctx: Context, file: str, configuration: VolumeConfiguration, name: str | None) -> Table:
    from cli import render

    return render.plan_table(
        [
            ("Project", ctx.project),
            ("Configuration", file),
            ("Type", "volume"),
            ("Name", name or "(none: set `name` or pass -n)"),
            ("Fleet", configuration.fleet or "(where a run without `fleets` goes)"),
            ("Instance", configuration.instance or "(the fleet's first)"),
        ]
    )


def volumes_table(volumes: list[VolumeInfo]) -> Table:
    from rich.table import Table

    from cli.render import ago

    table = Table(box=None, pad_edge=False)
    for column in ("NAME", "FLEET", "INSTANCE", "ATTACHED TO", "CREATED"):
        table.add_column(column, no_wrap=True)
    for volume in volumes:
        attached = volume.attached_to or "-"
        table.add_row(volume.name, volume.fleet, volume.instance, attached, ago(volume.created_at))
    return table


def volume_json(volume: VolumeInfo) -> dict[str, Any]:
    return volume.model_dump()
