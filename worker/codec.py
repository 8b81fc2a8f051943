"""The payload codec every Ferry client and worker uses (worker/temporal.py): each Temporal payload sealed
with AES-GCM under Ferry's key (store/keys.py, docs/secrets.md), so that the history in Temporal's database
and what its Web UI is answered hold no value in clear.

Workflow and activity inputs and results, signals, updates, queries and heartbeats are payloads; a failure's
message and stack trace become one too (the SDK's encoded failure attributes). A sealed payload's metadata
names its encoding and its key's id; one that is not sealed (a history older than the codec) is read as it
is. The Web UI reads the sealed ones through the codec endpoint (gateway/codec_endpoint.py).

A payload of COMPRESS_FROM bytes or more is compressed (zlib) before it is sealed, and its metadata says so:
a fleet's book, carried whole when the fleet continues as new, held 1.8 MB of JSON with 10,000 jobs, near
the server's 2 MB limit on one payload (docs/scaling.md#the-fleets-own-queue). Small ones, the hot path's,
are not: compressing them would cost CPU for little.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes, PayloadCodec

from store.keys import Keys, process_keys

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
COMPRESSION = "compression"  # metadata of a sealed payload whose content was compressed first
ZLIB = b"zlib"
COMPRESS_FROM = 64 * 1024


class EncryptionCodec(PayloadCodec):
    def __init__(self, keys: Keys) -> None:
        self._keys = keys

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.seal(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.open(payload) for payload in payloads]

    def seal(self, payload: Payload) -> Payload:
        content = payload.SerializeToString()
        metadata = {"encoding": ENCODING}
        if len(content) >= COMPRESS_FROM:
            content, metadata[COMPRESSION] = zlib.compress(content, 1), ZLIB  # level 1: fast, and enough
        key_id, sealed = self._keys.seal(content)
        return Payload(metadata={**metadata, KEY_ID: key_id.encode()}, data=sealed)

    def open(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        key_id = payload.metadata.get(KEY_ID, b"").decode(errors="replace")
        content = self._keys.unseal(key_id, payload.data)
        compression = payload.metadata.get(COMPRESSION)
        if compression == ZLIB:
            content = zlib.decompress(content)
        elif compression is not None:
            raise ValueError(f"a payload compressed with {compression!r}, which this Ferry cannot read")
        return Payload.FromString(content)


def data_converter(keys: Keys | None = None) -> DataConverter:
    """Pydantic payloads (Ferry's messages), sealed with `keys` (default: this process's)."""
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=EncryptionCodec(keys or process_keys()),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )
