"""The codec endpoint the proxy serves for the Temporal Web UI (worker/codec_server.py, docs/secrets.md):
Temporal's codec server protocol, behind a token only a holder of the key can make."""

from __future__ import annotations

import json

import aiohttp
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from store.keys import keys_of, process_keys
from tests.gateway.conftest import Harness
from worker.codec import ENCODING, EncryptionCodec
from worker.codec_server import codec_endpoint

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
