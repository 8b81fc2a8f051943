"""Connecting to Temporal the way every Ferry process does: pydantic payloads sealed with Ferry's key
(worker/codec.py, docs/secrets.md), and TLS, mTLS or an API key as the TEMPORAL_* variables say
(core/temporal_connection.py, docs/deployment.md)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Literal

from temporalio.client import Client
from temporalio.service import TLSConfig

from core.settings import Settings
from core.temporal_connection import (
    ConnectionSettingsError,
    PemSource,
    TemporalConnection,
    TLSSettings,
    check_pem,
)
from store.keys import Keys
from worker.codec import data_converter

# A dev server opens its port a moment before its frontend answers ("Frontend is not healthy yet").
_STARTING_GRACE = 30.0


async def connect(address: str, namespace: str = "default", keys: Keys | None = None) -> Client:
    """A plain client of the server at `address` whose payloads `keys` seal (default: this process's,
    store.keys): the embedded stack's and the tests' dev servers."""
    return await connect_to(TemporalConnection(address, namespace), keys)


async def connect_to(connection: TemporalConnection, keys: Keys | None = None) -> Client:
    """A client as `connection` says; ConnectionSettingsError for a file that cannot be read or is not
    PEM, RuntimeError ("Failed client connect: ...") for a server that cannot be reached or refuses."""
    tls: bool | TLSConfig = False if connection.tls is None else tls_config(connection.tls)
    converter = data_converter(keys)
    deadline = time.monotonic() + _STARTING_GRACE
    while True:
        try:
            return await Client.connect(
                connection.address,
                namespace=connection.namespace,
                data_converter=converter,
                tls=tls,
                api_key=connection.api_key,  # sent as `authorization: Bearer <key>` on every call
            )
        except RuntimeError as err:
            if "not healthy yet" not in str(err) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def connect_from_settings(settings: Settings) -> Client:
    return await connect_to(settings.temporal_connection())


def tls_config(tls: TLSSettings) -> TLSConfig:
    """The SDK's TLS settings, each PEM read and checked first so that a bad one is named."""
    client_cert = _read(tls.client_cert, "certificate")
    client_key = _read(tls.client_key, "private key")
    return TLSConfig(
        server_root_ca_cert=_read(tls.server_ca, "certificate"),
        domain=tls.server_name,
        client_cert=client_cert,
        client_private_key=client_key,
    )


def _read(source: PemSource | None, kind: Literal["certificate", "private key"]) -> bytes | None:
    if source is None:
        return None
    if source.data is not None:
        content = source.data.encode()
    else:
        assert source.path is not None
        try:
            content = Path(source.path).expanduser().read_bytes()
        except OSError as err:
            raise ConnectionSettingsError(
                f"{source.variable}: cannot read {source.path}: {err.strerror or err}"
            ) from None
    return check_pem(source, content, kind)
