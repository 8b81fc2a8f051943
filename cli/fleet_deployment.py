"""Following a fleet's first deployment, whoever describes the fleet: its scheduler itself
(cli.fleet_api.FleetAPI) or the API (cli.fleet_clients.RemoteFleets)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from core.fleets.messages import FleetDescription


async def until_deployed(
    describe: Callable[[str], Awaitable[FleetDescription]], name: str, timeout: float, poll: float = 0.1
) -> FleetDescription:
    """Until the fleet's first deployment has ended (or `timeout` seconds): its description then."""
    deadline = time.monotonic() + timeout
    while True:
        described = await describe(name)
        if described.deployed or time.monotonic() > deadline:
            return described
        await asyncio.sleep(poll)
