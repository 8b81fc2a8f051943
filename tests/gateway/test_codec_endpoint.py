"""The codec endpoint the proxy serves for the Temporal Web UI (gateway/codec_endpoint.py, docs/secrets.md):
Temporal's codec server protocol, behind a token only a holder of the key can make."""

from __future__ import annotations

import json

import aiohttp
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from gateway.codec_endpoint import codec_endpoint
from store.keys import keys_of, process_keys
from tests.gateway.conftest import Harness
from worker.codec import COMPRESSION, ENCODING, ZLIB, EncryptionCodec

PLAIN = Payload(metadata={"encoding": b"json/plain"}, data=b'{"env": {"HF_TOKEN": "a value"}}')


def body(*payloads: Payload) -> str:
    return json_format.MessageToJson(Payloads(payloads=list(payloads)))


def payloads_of(answer: str) -> list[Payload]:
    return list(json_format.Parse(answer, Payloads()).payloads)


async def test_the_ui_decodes_and_encodes_through_the_proxy(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    _, url = await harness.gateway()
    keys = process_keys()
    sealed = await EncryptionCodec(keys).encode([PLAIN])
    assert sealed[0].metadata["encoding"] == ENCODING and b"a value" not in sealed[0].data
    endpoint = codec_endpoint(url, keys)
    headers = {
        "Content-Type": "application/json",
        "X-Namespace": "default",
        "Origin": "http://127.0.0.1:8233",
    }

    async with http.post(f"{endpoint}/decode", data=body(*sealed, PLAIN), headers=headers) as answer:
        assert answer.status == 200
        assert answer.headers["Access-Control-Allow-Origin"] == "http://127.0.0.1:8233"
        assert payloads_of(await answer.text()) == [PLAIN, PLAIN]  # one not sealed is read as it is
    async with http.post(f"{endpoint}/encode", data=body(PLAIN), headers=headers) as answer:
        [encoded] = payloads_of(await answer.text())
        assert await EncryptionCodec(keys).decode([encoded]) == [PLAIN]


async def test_without_the_token_or_from_another_origin_nothing_is_decoded(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    _, url = await harness.gateway()
    sealed = await EncryptionCodec(process_keys()).encode([PLAIN])
    another = codec_endpoint(url, keys_of([bytes(32)]))  # a token made from another key
    async with http.post(f"{another}/decode", data=body(*sealed)) as answer:
        assert answer.status == 404
        assert "a value" not in await answer.text()
    preflight = {"Origin": "https://elsewhere.example", "Access-Control-Request-Method": "POST"}
    endpoint = codec_endpoint(url, process_keys())
    async with http.options(f"{endpoint}/decode", headers=preflight) as answer:
        assert "Access-Control-Allow-Origin" not in answer.headers
    preflight["Origin"] = "http://localhost:8233"
    async with http.options(f"{endpoint}/decode", headers=preflight) as answer:
        assert answer.headers["Access-Control-Allow-Origin"] == "http://localhost:8233"
        assert "X-Namespace" in answer.headers["Access-Control-Allow-Headers"]
    async with http.post(f"{endpoint}/decode", data="not json") as answer:
        assert answer.status == 400
        assert json.loads(await answer.text())["message"].startswith("not Payloads")


def a_fleet_book(jobs: int) -> Payload:
    """A payload shaped like a fleet's book of `jobs` allocations (JSON, the same keys over and over)."""
    allocations = [
        {"job_id": f"ferry/main/s{n}/0/0/0", "cpu": 0.0, "memory": 0.0, "gpu": 0} for n in range(jobs)
    ]
    return Payload(
        metadata={"encoding": b"json/plain"}, data=json.dumps({"allocations": allocations}).encode()
    )


async def test_a_large_payload_is_compressed_before_it_is_sealed_and_the_ui_reads_it(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    keys = process_keys()
    book = a_fleet_book(30_000)
    assert len(book.data) > 2_000_000  # over the server's limit on one payload, as it is
    [sealed] = await EncryptionCodec(keys).encode([book])
    assert sealed.metadata[COMPRESSION] == ZLIB
    assert len(sealed.data) < len(book.data) / 5
    assert await EncryptionCodec(keys).decode([sealed]) == [book]
    [small] = await EncryptionCodec(keys).encode([PLAIN])
    assert COMPRESSION not in small.metadata  # the hot path's payloads are only sealed
    _, url = await harness.gateway()
    headers = {"Content-Type": "application/json", "X-Namespace": "default"}
    endpoint = codec_endpoint(url, keys)
    async with http.post(f"{endpoint}/decode", data=body(sealed), headers=headers) as answer:
        assert payloads_of(await answer.text()) == [book]


async def test_a_payload_compressed_in_a_way_this_ferry_does_not_know_is_refused_by_name() -> None:
    keys = process_keys()
    [sealed] = await EncryptionCodec(keys).encode([a_fleet_book(5_000)])
    sealed.metadata[COMPRESSION] = b"zstd"
    with pytest.raises(ValueError, match="compressed with b'zstd'"):
        await EncryptionCodec(keys).decode([sealed])
