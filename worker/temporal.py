"""Connecting to Temporal the way every Ferry process does: pydantic payloads sealed with Ferry's key
(worker/codec.py, docs/secrets.md), FERRY_* settings."""

from __future__ import annotations

import asyncio
import time

from temporalio.client import Client

from core.settings import Settings
from store.keys import Keys
from worker.codec import data_converter

# A dev server opens its port a moment before its frontend answers ("Frontend is not healthy yet").
_STARTING_GRACE = 30.0


async def connect(address: str, namespace: str = "default", keys: Keys | None = None) -> Client:
    """A client whose payloads `keys` seal (default: this process's, store.keys)."""
    converter = data_converter(keys)
    deadline = time.monotonic() + _STARTING_GRACE
    while True:
        try:
            return await Client.connect(address, namespace=namespace, data_converter=converter)
        except RuntimeError as err:
            if "not healthy yet" not in str(err) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def connect_from_settings(settings: Settings) -> Client:
    if settings.temporal_address is None:
        raise RuntimeError("FERRY_TEMPORAL_ADDRESS is not set and no embedded stack is running")
    return await connect(settings.temporal_address, settings.temporal_namespace)
