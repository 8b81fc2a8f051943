"""Connecting to Temporal the way every Ferry process does: pydantic payloads, FERRY_* settings."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from core.settings import Settings


async def connect(address: str, namespace: str = "default") -> Client:
    return await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter)


async def connect_from_settings(settings: Settings) -> Client:
    if settings.temporal_address is None:
        raise RuntimeError("FERRY_TEMPORAL_ADDRESS is not set and no embedded stack is running")
    return await connect(settings.temporal_address, settings.temporal_namespace)
