"""The payload codec every Ferry client and worker uses (worker/temporal.py): each Temporal payload sealed
with AES-GCM under Ferry's key (store/keys.py, docs/secrets.md), so that the history in Temporal's database
and what its Web UI is answered hold no value in clear.

Workflow and activity inputs and results, signals, updates, queries and heartbeats are payloads; a failure's
message and stack trace become one too (the SDK's encoded failure attributes). A sealed payload's metadata
names its encoding and its key's id; one that is not sealed (a history older than the codec) is read as it
is. The Web UI reads the sealed ones through the codec endpoint (worker/codec_server.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes, PayloadCodec

from store.keys import Keys, process_keys

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"


class EncryptionCodec(PayloadCodec):
    def __init__(self, keys: Keys) -> None:
        self._keys = keys

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.seal(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.open(payload) for payload in payloads]

    def seal(self, payload: Payload) -> Payload:
        key_id, sealed = self._keys.seal(payload.SerializeToString())
        return Payload(metadata={"encoding": ENCODING, KEY_ID: key_id.encode()}, data=sealed)

    def open(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        key_id = payload.metadata.get(KEY_ID, b"").decode(errors="replace")
        return Payload.FromString(self._keys.unseal(key_id, payload.data))


def data_converter(keys: Keys | None = None) -> DataConverter:
    """Pydantic payloads (Ferry's messages), sealed with `keys` (default: this process's)."""
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=EncryptionCodec(keys or process_keys()),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )
