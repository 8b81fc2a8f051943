"""Bodies streamed both ways, unchanged; server-sent events as they come; WebSockets; replicas that fail."""

from __future__ import annotations

import asyncio
import gzip
import hashlib

import aiohttp
from aiohttp import web

from tests.gateway.conftest import Harness, add_replica, add_service, eventually


async def test_server_sent_events_arrive_as_they_are_sent(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    run_id = add_service(harness.store, auth=False)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    _, proxy = await harness.gateway()
    loop = asyncio.get_running_loop()
    async with http.get(f"{proxy}/proxy/services/main/app/sse") as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        assert "Content-Length" not in response.headers and "Content-Encoding" not in response.headers
        assert await response.content.readuntil(b"\n\n") == b"data: one\n\n"
        first_at = loop.time()
        assert "two" not in replica.sent_at  # the replica has not sent the second event yet
        assert await response.content.readuntil(b"\n\n") == b"data: two\n\n"
        assert await response.content.read() == b""
    assert first_at < replica.sent_at["two"]


async def _big(request: web.Request) -> web.StreamResponse:
    """Hashes the upload as it streams in, and streams back 4 MiB, compressed, in pieces."""
    digest = hashlib.sha256()
    async for chunk in request.content.iter_any():
        digest.update(chunk)
    response = web.StreamResponse(headers={"Content-Encoding": "gzip", "X-Upload-Sha256": digest.hexdigest()})
    await response.prepare(request)
    body = gzip.compress(b"ferry " * 700_000)
    for start in range(0, len(body), 65536):
        await response.write(body[start : start + 65536])
    await response.write_eof()
    return response


async def test_large_bodies_pass_unchanged(harness: Harness, http: aiohttp.ClientSession) -> None:
    app = web.Application()
    app.router.add_post("/big", _big)
    url = await harness.app(app)
    run_id = add_service(harness.store, auth=False)
    add_replica(harness.store, run_id, "r-0", url)
    _, proxy = await harness.gateway()

    async def upload() -> object:
        for _ in range(80):
            yield b"x" * 65536  # 5 MiB, chunked (no Content-Length)

    async with http.post(
        f"{proxy}/proxy/services/main/app/big", data=upload(), auto_decompress=False
    ) as reply:
        assert reply.status == 200
        assert reply.headers["X-Upload-Sha256"] == hashlib.sha256(b"x" * 65536 * 80).hexdigest()
        assert reply.headers["Content-Encoding"] == "gzip"  # passed as it was, not decompressed
        assert gzip.decompress(await reply.read()) == b"ferry " * 700_000


async def test_a_websocket_is_proxied_both_ways(harness: Harness, http: aiohttp.ClientSession) -> None:
    run_id = add_service(harness.store, auth=False)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    gateway, proxy = await harness.gateway()
    async with http.ws_connect(f"{proxy}/proxy/services/main/app/ws", protocols=("echo.v1",)) as ws:
        assert ws.protocol == "echo.v1"
        await ws.send_str("hello")
        assert await ws.receive_str(timeout=2) == "one: hello"
        await ws.send_bytes(b"\x00\x01\x02")
        assert await ws.receive_bytes(timeout=2) == b"\x02\x01\x00"
        assert gateway.balancer.in_flight("r-0") == 1  # for the socket's whole life
        await ws.send_str("close please")
        closing = await ws.receive(timeout=2)
        assert closing.type == aiohttp.WSMsgType.CLOSE
        assert ws.close_code == 4001  # the replica's own code
    await asyncio.sleep(0.05)
    assert gateway.balancer.in_flight("r-0") == 0


async def test_the_client_closing_a_websocket_closes_the_replicas(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    run_id = add_service(harness.store, auth=False)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    gateway, proxy = await harness.gateway()
    ws = await http.ws_connect(f"{proxy}/proxy/services/main/app/ws")
    await ws.send_str("hi")
    assert await ws.receive_str(timeout=2) == "one: hi"
    await ws.close()
    for _ in range(100):
        if gateway.balancer.in_flight("r-0") == 0:
            break
        await asyncio.sleep(0.01)
    assert gateway.balancer.in_flight("r-0") == 0


async def _hang_up(request: web.Request) -> web.StreamResponse:
    if request.path == "/before":
        assert request.transport is not None
        request.transport.close()  # no answer at all
        return web.Response()
    if request.path == "/small":
        # A small answer (read whole by the proxy) whose body stops short of its Content-Length.
        response = web.StreamResponse(headers={"Content-Length": "100"})
        await response.prepare(request)
        await response.write(b"only ten b")
        assert request.transport is not None
        request.transport.close()
        return response
    response = web.StreamResponse()
    await response.prepare(request)
    await response.write(b"partial")
    await asyncio.sleep(0.05)
    assert request.transport is not None
    request.transport.close()  # mid-answer
    await asyncio.sleep(0.1)
    return response


async def test_a_replica_failing_gives_502_or_a_cut_answer(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _hang_up)
    url = await harness.app(app)
    run_id = add_service(harness.store, auth=False)
    add_replica(harness.store, run_id, "r-0", url)
    gateway, proxy = await harness.gateway()
    async with http.post(f"{proxy}/proxy/services/main/app/before", data=b"body") as response:
        assert response.status == 502
        assert "of main/app failed before answering" in await response.text()
    async with http.get(f"{proxy}/proxy/services/main/app/during") as response:
        assert response.status == 200
        try:
            await response.read()
        except aiohttp.ClientPayloadError:
            pass  # the answer is cut, not passed off as whole
        else:
            raise AssertionError("a cut answer was passed off as whole")
    async with http.get(f"{proxy}/proxy/services/main/app/small") as response:
        assert response.status == 502  # read whole before answering: said, not cut
        assert "of main/app failed mid-answer" in await response.text()
    assert gateway.balancer.in_flight("r-0") == 0


async def test_a_client_leaving_mid_stream_frees_the_replica(harness: Harness) -> None:
    run_id = add_service(harness.store, auth=False)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    gateway, proxy = await harness.gateway()
    async with aiohttp.ClientSession() as http:
        response = await http.get(f"{proxy}/proxy/services/main/app/sse")
        assert await response.content.readuntil(b"\n\n") == b"data: one\n\n"
        assert gateway.balancer.in_flight("r-0") == 1
        response.close()  # the client goes away while the replica is still streaming
        await eventually(lambda: gateway.balancer.in_flight("r-0") == 0, timeout=0.3)
        assert "two" not in replica.sent_at
        await eventually(lambda: "cut" in replica.sent_at)  # the replica learns it as it writes again
