"""Where a run could go now (`ferry offer`, docs/cli.md#offer), asked of the fleet's scheduler: what Ferry's
API does for `POST /api/projects/{p}/offers` (docs/teams.md#fleets), and an operator's CLI itself."""

from __future__ import annotations

import asyncio
import secrets
from typing import TYPE_CHECKING

from core.configuration import RunConfiguration
from core.fleets.offers import FleetOffer
from core.run_types import configurator_for
from core.run_types.volumes import job_volumes, volumes_instance
from core.runs.submissions import replica_enqueue
from core.wire.job_messages import PlacementRequest
from core.wire.workflow_ids import LOCAL_FLEET

if TYPE_CHECKING:
    from cli.fleet_api import FleetAPI
    from store import Store

DEPLOY_WAIT_S = 60.0


async def ask_offer(store: Store, fleets: FleetAPI, configuration: RunConfiguration) -> FleetOffer:
    """What the fleet a run of `configuration` would be submitted to answers now (and its backend, for a
    fleet with `nodes`)."""
    from cli.fleet_api import first_fleet
    from cli.volume_api import run_volumes

    project = fleets.project
    on, volume_instances = await asyncio.to_thread(run_volumes, store, project, configuration)
    fleet = on or await first_fleet(store, project, configuration.fleets)
    if fleet == LOCAL_FLEET:
        await fleets.ensure_local()
    # A fleet still deploying has not all its instances yet: the answer waits for them (as `apply` would).
    await fleets.wait_deployed(fleet, DEPLOY_WAIT_S)
    answer = await fleets.offer(fleet, offer_request(configuration, project, volume_instances))
    if answer.never is None:  # a fleet with `nodes`: what its backend could give too (docs/backends.md)
        from cli.backend_offers import backend_offers

        nodes = configurator_for(configuration).nodes_per_replica()
        answer = answer.model_copy(update={"backend": await backend_offers(store, project, fleet, nodes)})
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
