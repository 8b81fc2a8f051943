"""Connecting to Temporal the way every Ferry process does: pydantic payloads, FERRY_* settings."""

from __future__ import annotations

import asyncio
import time

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from core.settings import Settings

# A dev server opens its port a moment before its frontend answers ("Frontend is not healthy yet").
_STARTING_GRACE = 30.0


async def connect(address: str, namespace: str = "default") -> Client:
    deadline = time.monotonic() + _STARTING_GRACE
    while True:
        try:
            return await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter)
        except RuntimeError as err:
            if "not healthy yet" not in str(err) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def connect_from_settings(settings: Settings) -> Client:
    if settings.temporal_address is None:
        raise RuntimeError("FERRY_TEMPORAL_ADDRESS is not set and no embedded stack is running")
    return await connect(settings.temporal_address, settings.temporal_namespace)
