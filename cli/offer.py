"""`ferry offer -f FILE [--json]` (docs/cli.md#offer): where a run of FILE could go now, as `dstack offer`
lists what could run a configuration: each instance of the fleet it would be submitted to, whether a node
of its replica fits there now, once others' jobs end, or never, and why; then what the whole replica would
meet. The fleet's scheduler answers (core/fleets/offers.py), asked through Ferry's API (cli/offer_api.py);
nothing is submitted, queued or held.
"""

from __future__ import annotations

import asyncio
import json

import typer

from cli import exit_codes, render
from cli.context import Context
from cli.errors import CommandError
from cli.tables import Column, FittedTable, Row
from core.configuration import RunConfiguration
from core.configuration.pipeline import LoadedPipeline, load_run_file
from core.fleets.offers import Fit, FleetOffer
from core.run_types import configurator_for

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
    answer = asyncio.run(Context.from_env().fleets().offer(configuration))
    if as_json:
        typer.echo(json.dumps(answer.model_dump(mode="json"), indent=2))
    else:
        console = render.console()
        console.print(offer_table(answer, configuration, wide=wide))
        render.console(stderr=True).print(verdict(answer), highlight=False, markup=False, soft_wrap=True)
    return exit_codes.USAGE if answer.never else exit_codes.OK


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
