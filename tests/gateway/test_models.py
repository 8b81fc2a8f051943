"""`/proxy/models/<project>/v1`: the OpenAI client lists the models and streams a chat completion."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import openai
import pytest
from aiohttp import web
from openai import AsyncOpenAI

from tests.gateway.conftest import TOKEN, Harness, add_replica, add_service, bearer


def openai_server(name: str) -> web.Application:
    """A small OpenAI-compatible server: /v1/models, and /v1/chat/completions streamed word by word."""

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": name, "object": "model", "created": 0}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        words = ["Hello", " from", f" {body['model']}", "!"]
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(words)}
            return web.json_response(
                {
                    "id": "c-1",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for word in words:
            chunk = {
                "id": "c-1",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await asyncio.sleep(0.01)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/api/v1/chat/completions", chat)
    return app


@pytest.fixture
async def models_proxy(harness: Harness) -> str:
    llama = add_service(harness.store, "llama", model="llama-3-8b")
    public = add_service(
        harness.store, "mistral", auth=False, model={"type": "chat", "name": "mistral", "prefix": "/api/v1/"}
    )
    add_service(harness.store, "plain", auth=False)  # no model: not listed
    add_service(harness.store, "elsewhere", project="other", model="qwen")
    add_replica(harness.store, llama, "l-0", await harness.app(openai_server("llama-3-8b")))
    add_replica(harness.store, public, "m-0", await harness.app(openai_server("mistral")))
    _, proxy = await harness.gateway()
    return proxy


async def test_the_openai_client_lists_models_and_streams_a_chat(models_proxy: str) -> None:
    client = AsyncOpenAI(base_url=f"{models_proxy}/proxy/models/main/v1", api_key=TOKEN, max_retries=0)
    try:
        listed = await client.models.list()
        assert sorted(model.id for model in listed.data) == ["llama-3-8b", "mistral"]
        assert {model.owned_by for model in listed.data} == {"main"}
        assert all(isinstance(model.created, int) and model.created > 0 for model in listed.data)
        assert (await client.models.retrieve("mistral")).id == "mistral"

        for model in ("llama-3-8b", "mistral"):
            stream = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], stream=True
            )
            pieces = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices]
            assert pieces == ["Hello", " from", f" {model}", "!"]

        done = await client.chat.completions.create(
            model="mistral", messages=[{"role": "user", "content": "hi"}]
        )
        assert done.choices[0].message.content == "Hello from mistral!"

        with pytest.raises(openai.NotFoundError) as unknown:
            await client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
        assert "the model 'gpt-9' is not served in project main" in str(unknown.value)
    finally:
        await client.close()


async def test_model_requests_check_the_services_auth(models_proxy: str, http: aiohttp.ClientSession) -> None:
    base = f"{models_proxy}/proxy/models/main/v1"
    chat = {"model": "llama-3-8b", "messages": [{"role": "user", "content": "hi"}]}
    async with http.post(f"{base}/chat/completions", json=chat) as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert "`ferry token` shows yours" in (await response.json())["error"]["message"]
    async with http.post(f"{base}/chat/completions", json=chat, headers=bearer()) as response:
        assert response.status == 200
    async with http.post(f"{base}/chat/completions", json={**chat, "model": "mistral"}) as response:
        assert response.status == 200  # a public service's model needs no token
    # Without a token only the public models are listed; a wrong token is refused.
    async with http.get(f"{base}/models") as response:
        assert [model["id"] for model in (await response.json())["data"]] == ["mistral"]
    async with http.get(f"{base}/models", headers=bearer("wrong")) as response:
        assert response.status == 401


async def test_unknown_models_and_bad_bodies(models_proxy: str, http: aiohttp.ClientSession) -> None:
    base = f"{models_proxy}/proxy/models/main/v1"
    async with http.post(f"{base}/chat/completions", json={"model": "qwen"}, headers=bearer()) as response:
        assert response.status == 404  # another project's
        error = (await response.json())["error"]
        assert (error["code"], error["param"], error["type"]) == (
            "model_not_found",
            "model",
            "invalid_request_error",
        )
    async with http.post(f"{base}/chat/completions", data=b"{not json", headers=bearer()) as response:
        assert response.status == 400
        assert (await response.json())["error"]["message"] == "the request body is not JSON"
    async with http.post(f"{base}/completions", json={"prompt": "x"}, headers=bearer()) as response:
        assert response.status == 400
    async with http.get(f"{models_proxy}/proxy/models/nobody/v1/models") as response:
        assert await response.json() == {"object": "list", "data": []}
