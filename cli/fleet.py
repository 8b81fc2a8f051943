"""`ferry fleet list|delete`, `ferry apply -f fleet.yml` (apply_fleet) and `ferry set-priority RUN N`.

Thin commands over cli.fleet_clients: through Ferry's API as the logged-in user, which reaches the store,
the fleet's scheduler (FleetWorkflow) or the run's workflow (docs/teams.md#fleets).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import typer

from cli.errors import FerryGroup, one_line_errors
from cli.tables import Column, FittedTable, Row
from cli.teams import PROJECT, use_project

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from cli.context import Context
    from cli.fleet_clients import ProjectFleets
    from core.configuration import FleetConfiguration
    from core.configuration.loading import LoadedConfiguration
    from core.fleets.messages import FleetDescription
    from store import FleetRecord, InstanceRecord

DEPLOY_WAIT = 600.0  # seconds `ferry apply` follows a fleet's deployment
DELETE_WAIT = 120.0

fleet_app = typer.Typer(
    cls=FerryGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Fleets: the instances runs are placed on (SSH hosts, and this machine as `local`). "
    "Create one with `ferry apply -f fleet.yml`.",
)  # fmt: skip


@fleet_app.command("list")
@one_line_errors
def fleet_list(
    as_json: bool = typer.Option(False, "--json", help="JSON, for scripts (schema: docs/cli.md)."),
    wide: bool = typer.Option(False, "-v", "--wide", help="Every column, however wide."),
    project: str | None = PROJECT,
) -> None:
    """Fleets and their instances: status, address, the CPUs, memory and GPUs in use and free, busy
    blocks, jobs."""
    from cli import render
    from cli.context import Context

    use_project(project)
    fleets = [(row.fleet, row.instances) for row in Context.from_env().fleets().listed()]
    if as_json:
        typer.echo(json.dumps(fleets_json(fleets), indent=2))
        return
    render.console().print(fleets_table(fleets, wide=wide))


@fleet_app.command("delete")
@one_line_errors
def fleet_delete(
    name: str = typer.Argument(..., metavar="NAME", help="The fleet's name.", show_default=False),
    yes: bool = typer.Option(False, "-y", "--yes", help="Do not ask for confirmation."),
    project: str | None = PROJECT,
) -> None:
    """Delete a fleet: no new jobs go there; its instances (and their agents) go once their jobs end."""
    from cli.context import Context, confirm

    use_project(project)
    ctx = Context.from_env()
    if not confirm(f"Delete fleet {name}?", yes=yes):
        raise typer.Exit(1)
    typer.echo(asyncio.run(_delete(ctx, name)), err=True)


async def _delete(ctx: Context, name: str) -> str:
    described = (await ctx.fleets().delete(name, DELETE_WAIT)).described
    if described is None or described.idle:
        return f"fleet {name} deleted"
    jobs = sum(len(i.jobs) for i in described.instances)
    return f"fleet {name} is being deleted: its instances go once their {jobs} job(s) have ended"


def set_priority(run: str, priority: int) -> None:
    """`ferry set-priority RUN N`: the run's waiting jobs move in their fleet's queue (0-100, high first)."""
    from cli.context import Context

    asyncio.run(Context.from_env().fleets().set_priority(run, priority))
    typer.echo(f"run {run}: priority {priority}", err=True)


def apply_fleet(loaded: LoadedConfiguration, *, yes: bool, detach: bool, name: str | None = None) -> int:
    """`ferry apply -f fleet.yml`: create the fleet, then follow its hosts' deployment (not with -d).

    Exits 0 once every host is deployed (with -d: once the fleet is created), 1 otherwise."""
    from cli import render
    from cli.context import Context, confirm
    from core.configuration import FleetConfiguration

    configuration = loaded.configuration
    assert isinstance(configuration, FleetConfiguration)
    fleet_name = name or configuration.name
    ctx = Context.from_env()
    fleets = ctx.fleets()
    fleets.plan(configuration, fleet_name)  # refused before the plan when no backend can create its instances
    console = render.console(stderr=True)
    console.print(plan_table(ctx, loaded.file, configuration, fleet_name))
    if not confirm("Create the fleet?", yes=yes):
        return 1
    return asyncio.run(_apply(fleets, configuration, fleet_name, console, detach=detach))


async def _apply(
    fleets: ProjectFleets,
    configuration: FleetConfiguration,
    name: str | None,
    console: Console,
    *,
    detach: bool,
) -> int:
    applied = await fleets.apply(configuration, name)
    record, created = applied.fleet, applied.created
    hosts = len(configuration.ssh_config.hosts) if configuration.ssh_config else 0
    word = "created" if created else "unchanged"
    console.print(f"fleet {record.name} {word} ({hosts} host(s))", highlight=False)
    if detach:
        return 0
    from cli.fleet_deployment import until_deployed

    described = await until_deployed(fleets.describe, record.name, DEPLOY_WAIT, poll=0.5)
    rows = await asyncio.to_thread(fleets.listed)
    console.print(fleets_table([(row.fleet, row.instances) for row in rows if row.fleet.name == record.name]))
    return _deployment_result(described, console)


def _deployment_result(described: FleetDescription, console: Console) -> int:
    if not described.deployed:
        console.print(f"fleet {described.name}: still deploying after {DEPLOY_WAIT:.0f}s", highlight=False)
        return 1
    for host, why in sorted(described.pending.items()):
        console.print(f"{host}: not deployed (tried again every few seconds): {why}", highlight=False)
    return 1 if described.pending else 0


# --- what is shown ---------------------------------------------------------------------------------------


def plan_table(ctx: Context, file: str, configuration: FleetConfiguration, name: str | None) -> Table:
    from cli import render

    ssh = configuration.ssh_config
    hosts = [h.hostname + (f":{h.port}" if h.port else "") for h in ssh.hosts] if ssh else []
    return render.plan_table(
        [
            ("Project", ctx.project),
            ("Configuration", file),
            ("Type", "fleet"),
            ("Name", name or "(none: set `name` or pass -n)"),
            ("Hosts", ", ".join(hosts) or "-"),
            ("User", (ssh.user or "-") if ssh else "-"),
            ("Blocks", str(configuration.blocks)),
        ]
    )


def instance_use(instance: InstanceRecord) -> dict[str, dict[str, float]]:
    """The instance's total, what its jobs hold (`used`) and the rest (`free`): cpu, memory (GB), gpu."""
    total, used = instance.resources_data(), instance.in_use_data()
    keys = ("cpu", "memory", "gpu")
    totals = {key: round(total.get(key, 0), 3) for key in keys}  # to the MB: no float noise in `free`
    held = {key: round(used.get(key, 0), 3) for key in keys}
    return {
        "total": totals,
        "used": held,
        "free": {key: round(max(totals[key] - held[key], 0), 3) for key in keys},
    }


def _amount(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def _use_cells(instance: InstanceRecord) -> tuple[str, str, str]:
    """Its total, what is in use and what is free: `8cpu 62.7GB 4gpu`, `4cpu 32GB 2gpu`, `4cpu 30.7GB
    2gpu` (no gpu word without GPUs); `-` while its resources are unknown (a host not deployed)."""
    if not instance.resources_data():
        return "-", "-", "-"
    use = instance_use(instance)
    gpus = bool(use["total"]["gpu"])

    def text(amounts: dict[str, float]) -> str:
        words = f"{_amount(amounts['cpu'])}cpu {_amount(amounts['memory'])}GB"
        return f"{words} {_amount(amounts['gpu'])}gpu" if gpus else words

    return text(use["total"]), text(use["used"]), text(use["free"])


def _blocks(instance: InstanceRecord) -> str:
    """`busy/total` blocks; `shared` for an instance shared by exact needs (the local one)."""
    if instance.blocks is None:
        return "shared" if instance.resources_data() else "-"
    return f"{instance.busy_blocks}/{instance.blocks}"


FLEET_COLUMNS = (
    Column("FLEET"),
    Column("INSTANCE"),
    Column("STATUS"),
    Column("BACKEND", wide=True),
    Column("ADDRESS", optional=1),
    Column("RESOURCES", wide=True),
    Column("USED"),
    Column("FREE"),
    Column("BLOCKS"),
    Column("JOBS"),
    Column("ENGINE", wide=True),
    Column("AGENT", wide=True),
)


def fleets_table(
    fleets: list[tuple[FleetRecord, list[InstanceRecord]]], *, wide: bool = False
) -> FittedTable:
    """One row per fleet, then one per instance: the CPUs, memory and GPUs its jobs use and those free,
    busy blocks, jobs; an unreachable instance's reason under its row (docs/cli.md#ferry-fleet-list)."""
    rows = []
    for fleet, instances in fleets:
        rows.append(Row((fleet.name, "", fleet.status, fleet.backend, "", "", "", "", "", "", "", "")))
        for instance in instances:
            notes = [f"{instance.status}: {instance.status_message}"] if instance.status_message else []
            described = instance.description_data()
            total, used, free = _use_cells(instance)
            arch = (described.get("hardware") or {}).get("cpu_arch")  # matched by placement: docs/fleets.md
            cells = (
                "", instance.name, instance.status, "", instance.address or "-",
                f"{arch} {total}" if arch and total != "-" else total, used, free,
                _blocks(instance), str(instance.jobs), described.get("container_engine") or "-",
                described.get("agent_release") or "-",
            )  # fmt: skip
            rows.append(Row(cells, notes))
    return FittedTable(FLEET_COLUMNS, rows, wide=wide)


def _described(instance: InstanceRecord) -> dict[str, Any]:
    """What the instance is, as its agent last described it (docs/fleets.md#what-an-instance-is)."""
    described = instance.description_data()
    return {key: described.get(key) for key in ("hardware", "container_engine", "agent_release")}


def fleets_json(fleets: list[tuple[FleetRecord, list[InstanceRecord]]]) -> list[dict[str, Any]]:
    """`ferry fleet list --json`: its schema is in docs/cli.md#ferry-fleet-list---json."""
    return [
        {
            "name": fleet.name,
            "backend": fleet.backend,
            "status": fleet.status,
            "instances": [
                {
                    "name": i.name,
                    "status": i.status,
                    "message": i.status_message,
                    "address": i.address,
                    "resources": i.resources_data(),
                    **instance_use(i),
                    "blocks": i.blocks,
                    "busy_blocks": i.busy_blocks,
                    "free_blocks": None if i.blocks is None else max(i.blocks - i.busy_blocks, 0),
                    "jobs": i.jobs,
                    **_described(i),
                }
                for i in instances
            ],
        }
        for fleet, instances in fleets
    ]
