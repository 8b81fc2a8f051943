"""A worker that starts tells every project's local fleet what this machine's instance is now.

The local agent starts with the worker (or the stack), perhaps with something new: Podman brought up since
the last start, more memory. The fleet's own watch (`watch_local_instance`) would notice within seconds,
but a run submitted right after the start could be placed, or refused, on what the fleet knew before. So
the worker signals each local fleet the instance as its agent describes it before it polls any task
queue: the fleet hears it before any run submitted after the start (docs/fleets.md#what-an-instance-is).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from temporalio.client import Client
from temporalio.service import RPCError

from activities.fleet import local_slot
from activities.instances import LOCAL_INSTANCE, InstanceDirectory
from core.fleets.messages import FLEET_INSTANCE_READY, InstanceChange
from core.fleets.placement import InstanceStatus
from core.wire.workflow_ids import fleet_workflow_id
from store import Store

log = logging.getLogger(__name__)


async def tell_local_fleets(client: Client, store: Store, instances: InstanceDirectory) -> int:
    """Signals each local fleet of the store its instance as the agent describes it; how many were told.
    A fleet that has ended (its workflow gone) is skipped: the next run starts it anew, described."""
    fleets = await asyncio.to_thread(store.fleets_of_backend, "local")
    told = 0
    for fleet in fleets:
        try:
            slot = await local_slot(instances, fleet.name)
        except Exception as err:  # the fleet's own watch tells it once the agent answers
            log.warning("could not tell local fleet %s/%s its instance: %s", fleet.project, fleet.name, err)
            continue
        change = InstanceChange(name=LOCAL_INSTANCE, status=InstanceStatus.READY, slot=slot)
        handle = client.get_workflow_handle(fleet_workflow_id(fleet.project, fleet.name))
        with contextlib.suppress(RPCError):  # not found: ended, or never started
            await handle.signal(FLEET_INSTANCE_READY, change)
            told += 1
    log.info("told %d local fleet(s) what this machine's instance is", told)
    return told
