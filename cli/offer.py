"""`ferry offer -f FILE [--json]` (docs/cli.md#offer): where a run of FILE could go now, as `dstack offer`
lists what could run a configuration: each instance of the fleet it would be submitted to, whether a node
of its replica fits there now, once others' jobs end, or never, and why; then what the whole replica would
meet. The fleet's scheduler answers (core/fleets/offers.py); nothing is submitted, queued or held.
"""

from __future__ import annotations

import asyncio
import json
import secrets

import typer

from cli import exit_codes, render
from cli.context import Context
from cli.errors import CommandError
from cli.tables import Column, FittedTable, Row
from core.configuration import RunConfiguration
from core.configuration.pipeline import LoadedPipeline, load_run_file
from core.fleets.offers import Fit, FleetOffer
from core.run_types import configurator_for
from core.run_types.volumes import job_volumes, volumes_instance
from core.runs.submissions import replica_enqueue
from core.wire.job_messages import PlacementRequest
from core.wire.workflow_ids import LOCAL_FLEET

DEPLOY_WAIT_S = 60.0
OFFER_COLUMNS = (
    Column("INSTANCE"),
    Column("STATUS"),
    Column("FITS"),
    Column("NODES", optional=1),
    Column("INSTANCE IS", wide=True),
)


def offer(file: str, *, as_json: bool, wide: bool) -> int:
    loaded = load_run_file(file)
    loaded.ensure_runnable()
    configuration = None if isinstance(loaded, LoadedPipeline) else loaded.configuration
    if not isinstance(configuration, RunConfiguration):
        raise CommandError(
            f"{file}: only a task, a service or a dev environment has offers", exit_codes.USAGE
        )
    ctx = Context.from_env()
    answer = asyncio.run(_ask(ctx, configuration))
    if as_json:
        typer.echo(json.dumps(answer.model_dump(mode="json"), indent=2))
    else:
        console = render.console()
        console.print(offer_table(answer, configuration, wide=wide))
        render.console(stderr=True).print(verdict(answer), highlight=False, markup=False, soft_wrap=True)
    return exit_codes.USAGE if answer.never else exit_codes.OK


async def _ask(ctx: Context, configuration: RunConfiguration) -> FleetOffer:
    from cli.fleet_api import first_fleet
    from cli.volume_api import run_volumes

    api = await ctx.api()
    on, volume_instances = await asyncio.to_thread(run_volumes, api.store, ctx.project, configuration)
    fleet = on or await first_fleet(api.store, ctx.project, configuration.fleets)
    if fleet == LOCAL_FLEET:
        await api.fleets().ensure_local()
    # A fleet still deploying has not all its instances yet: the answer waits for them (as `apply` would).
    await api.fleets().wait_deployed(fleet, DEPLOY_WAIT_S)
    answer = await api.fleets().offer(fleet, offer_request(configuration, ctx.project, volume_instances))
    if answer.never is None:  # a fleet with `nodes`: what its backend could give too (docs/backends.md)
        from cli.backend_offers import backend_offers

        nodes = configurator_for(configuration).nodes_per_replica()
        answer = answer.model_copy(
            update={"backend": await backend_offers(api.store, ctx.project, fleet, nodes)}
        )
    return answer


def offer_request(
    configuration: RunConfiguration, project: str, volume_instances: dict[str, str]
) -> PlacementRequest:
    """Replica 0's placement request, as its run would enqueue it (core/runs/submissions.py), under ids no
    job has."""
    nodes = configurator_for(configuration).nodes_per_replica()
    volumes = [job_volumes(configuration, project, node, volume_instances) for node in range(nodes)]
    enqueue = replica_enqueue(
        configuration,
        run_id=f"offer-{secrets.token_hex(6)}",
        replica_num=0,
        submissions=[0] * nodes,
        job_workflow_ids=[""] * nodes,
        priority=configuration.priority or 0,
        instances=[volumes_instance(node_volumes, volume_instances) for node_volumes in volumes],
    )
    return enqueue.request


def offer_table(answer: FleetOffer, configuration: RunConfiguration, *, wide: bool) -> FittedTable:
    nodes = configurator_for(configuration).nodes_per_replica()
    rows = [
        Row(
            (
                one.instance,
                one.status,
                str(one.fit),
                "all" if len(one.nodes) == nodes else ", ".join(str(n) for n in one.nodes) or "-",
                one.described or "-",
            ),
            [("why not now: " if one.fit == Fit.WHEN_FREE else "why never: ") + "; ".join(one.reasons)]
            if one.reasons
            else [],
        )
        for one in answer.instances
    ]
    rows += [
        Row(
            (
                f"new ({one.backend}, partition {one.partition}{', preemptible' if one.preemptible else ''})",
                "-",
                str(one.fit),
                "all",
                "-",
            ),
            [("why not now: " if one.fit == Fit.WHEN_FREE else "why never: ") + "; ".join(one.reasons)]
            if one.reasons
            else [],
        )
        for one in answer.backend
    ]
    return FittedTable(OFFER_COLUMNS, rows, wide=wide)


def verdict(answer: FleetOffer) -> str:
    if answer.never:
        return f"fleet {answer.fleet}: can never run it: {answer.never}"
    if answer.starts_now:
        return f"fleet {answer.fleet}: a run submitted now would be placed at once"
    if any(one.fit == Fit.NOW for one in answer.backend):
        return (
            f"fleet {answer.fleet}: a run submitted now would get a new instance, which its backend gives now"
        )
    if answer.backend:
        return (
            f"fleet {answer.fleet}: a run submitted now would wait for a new instance (see the reasons above)"
        )
    return f"fleet {answer.fleet}: a run submitted now would wait for capacity (see ferry fleet list)"
