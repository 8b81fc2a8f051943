"""The fast path (gateway.fast_path.connection): plain requests served on it, kept-alive both ways, bodies
streamed, failures said or cut; everything else handed to the aiohttp app on the same connection."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.app import Gateway
from tests.gateway.conftest import FAST, Harness, add_replica, add_service, bearer, eventually


def app_connections(harness: Harness) -> int:
    """Connections the proxy's aiohttp app serves (handed over by the fast path, or its own)."""
    server = harness.runners[-1].server
    assert server is not None
    return len(server.connections)


class PeerCounting:
    """A replica app that says which of its connections each request came on."""

    def __init__(self) -> None:
        self.peers: list[object] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        assert request.transport is not None
        self.peers.append(request.transport.get_extra_info("peername"))
        return web.Response(text=f"{request.method} {request.raw_path} {len(await request.read())}")


async def _service(harness: Harness, app: web.Application, **config: Any) -> tuple[Gateway, str]:
    url = await harness.app(app)
    run_id = add_service(harness.store, **{"auth": False, **config})
    add_replica(harness.store, run_id, "r-0", url)
    return await harness.gateway()


async def test_requests_keep_both_connections_alive(harness: Harness) -> None:
    replica = PeerCounting()
    gateway, proxy = await _service(harness, replica.app())
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
        for number in range(20):
            async with http.post(f"{proxy}/proxy/services/main/app/n{number}", data=b"x" * number) as reply:
                assert (reply.status, await reply.text()) == (200, f"POST /n{number} {number}")
    assert len(replica.peers) == 20 and len(set(replica.peers)) == 1  # one connection to the replica
    assert app_connections(harness) == 0  # all of them on the fast path
    assert gateway.balancer.in_flight("r-0") == 0


async def _stream(request: web.Request) -> web.StreamResponse:
    digest, size = hashlib.sha256(), 0
    async for piece in request.content.iter_any():
        digest.update(piece)
        size += len(piece)
    headers = {"X-Upload-Sha256": digest.hexdigest(), "X-Upload-Size": str(size)}
    length = int(request.query.get("length", "0"))
    if length:
        headers["Content-Length"] = str(length)
    response = web.StreamResponse(headers=headers)
    await response.prepare(request)
    block = bytes(range(256)) * 256
    for start in range(0, length or 8 * len(block), len(block)):
        await response.write(block[: min(len(block), (length or 8 * len(block)) - start)])
    await response.write_eof()
    return response


@pytest.mark.parametrize("length", [0, 20 * 1024 * 1024])  # chunked, or a Content-Length
async def test_a_large_body_streams_both_ways(harness: Harness, length: int) -> None:
    app = web.Application(client_max_size=0)
    app.router.add_post("/stream", _stream)
    _, proxy = await _service(harness, app)
    upload = bytes(range(251)) * 80_000  # 20 MB, sent with its Content-Length

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(upload), 1 << 20):
            yield upload[start : start + (1 << 20)]

    async with aiohttp.ClientSession() as http:
        url = f"{proxy}/proxy/services/main/app/stream?length={length}"
        headers = {"Content-Length": str(len(upload))}
        async with http.post(url, data=pieces(), headers=headers) as reply:
            assert reply.status == 200
            assert reply.headers["X-Upload-Size"] == str(len(upload))
            assert reply.headers["X-Upload-Sha256"] == hashlib.sha256(upload).hexdigest()
            body = await reply.read()
    expected = length or 8 * 65536
    assert len(body) == expected and body[:512] == bytes(range(256)) * 2
    assert app_connections(harness) == 0


@contextlib.asynccontextmanager
async def _through_proxy(harness: Harness, handle: object) -> AsyncIterator[tuple[Gateway, str]]:
    """A raw replica (`handle` answers each connection) of service main/app, behind the proxy: the gateway
    and its address; the replica closed at the end."""
    server = await asyncio.start_server(handle, "127.0.0.1", 0)  # type: ignore[arg-type]
    run_id = add_service(harness.store, auth=False)
    add_replica(harness.store, run_id, "r-0", f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    try:
        yield await harness.gateway()
    finally:
        server.close()


async def test_a_replica_closing_mid_answer_or_before_it(harness: Harness) -> None:
    """Chunks then a hang-up: the client's connection is cut. A kept connection closed instead of an
    answer: a GET is sent again (on a new connection), a POST gets 502."""
    answered = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if b"Content-Length: 4" in head:
                await reader.readexactly(4)
            if head.startswith(b"GET /cut"):
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
                await writer.drain()
                await asyncio.sleep(0.05)
                break
            if answered % 2 == 1:  # every second request: the connection closes, unanswered
                answered += 1
                break
            answered += 1
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
        writer.close()

    async with _through_proxy(harness, handle) as (gateway, proxy), aiohttp.ClientSession() as http:
        async with http.get(f"{proxy}/proxy/services/main/app/cut") as reply:
            assert reply.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await reply.read()
        for _ in range(3):  # the second finds its kept connection closed: sent again
            async with http.get(f"{proxy}/proxy/services/main/app/get") as reply:
                assert (reply.status, await reply.text()) == (200, "ok")
        async with http.post(f"{proxy}/proxy/services/main/app/post", data=b"body") as reply:
            assert reply.status == 502
            assert "of main/app failed before answering" in await reply.text()
    assert gateway.balancer.in_flight("r-0") == 0


async def test_answers_the_proxy_reframes_or_sends_in_pieces(harness: Harness) -> None:
    """An answer delimited by the replica closing reaches the client chunked, whole; an HTTP/1.0 one
    gets an HTTP/1.1 head without its hop-by-hop headers; a head that comes before its first chunk is
    passed on at once."""
    first_chunk = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(b"GET /late"):
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            await first_chunk.wait()
            writer.write(b"4\r\nlate\r\n0\r\n\r\n")
        elif head.startswith(b"GET /old"):
            writer.write(b"HTTP/1.0 200 Fine\r\nKeep-Alive: timeout=5\r\nX-A: 1\r\n\r\nold ")
            writer.write(b"news")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nuntil the end")
        await writer.drain()
        writer.close()

    async with _through_proxy(harness, handle) as (gateway, proxy), aiohttp.ClientSession() as http:
        async with http.get(f"{proxy}/proxy/services/main/app/close") as reply:
            assert reply.headers["Transfer-Encoding"] == "chunked" and reply.headers["X-A"] == "1"
            assert await reply.text() == "until the end"
        async with http.get(f"{proxy}/proxy/services/main/app/old") as reply:
            assert (reply.version, reply.reason, await reply.text()) == ((1, 1), "Fine", "old news")
            assert "Keep-Alive" not in reply.headers
        async with http.get(f"{proxy}/proxy/services/main/app/late") as reply:
            assert reply.status == 200  # the head came before any of the body
            first_chunk.set()
            assert await reply.text() == "late"
    assert gateway.balancer.in_flight("r-0") == 0


async def test_auth_on_the_fast_path_and_a_refusal_handed_to_the_app(harness: Harness) -> None:
    replica = PeerCounting()
    gateway, proxy = await _service(harness, replica.app(), auth=True)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
        url = f"{proxy}/proxy/services/main/app/x"
        for _ in range(3):  # the first looks the token up; all on the fast path
            async with http.get(url, headers=bearer()) as reply:
                assert reply.status == 200
        assert app_connections(harness) == 0
        async with http.get(url, headers=bearer("wrong")) as reply:
            assert reply.status == 401
            assert reply.headers["WWW-Authenticate"] == "Bearer"
            assert reply.headers["Connection"] == "close"  # the app answers one request a connection
        await eventually(lambda: app_connections(harness) == 0)
        async with http.get(url, headers=bearer()) as reply:  # a new connection, on the fast path again
            assert reply.status == 200
            assert "Connection" not in reply.headers
    assert len(replica.peers) == 4
    await eventually(lambda: harness.store.request_count("run-app", 0) == 4)


async def _raw(proxy: str, data: bytes, until: bytes | None = None) -> bytes:
    """Sends `data` on a new connection; what comes back until the proxy closes (or `until` arrives)."""
    host, port = proxy.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    received = b""
    try:
        while until is None or received.count(until) < 1:
            piece = await asyncio.wait_for(reader.read(65536), 2)
            if not piece:
                break
            received += piece
    finally:
        writer.close()
    return received


async def test_unusual_requests_go_to_the_app(harness: Harness) -> None:
    replica = PeerCounting()
    _, proxy = await _service(harness, replica.app())
    base = "/proxy/services/main/app"
    # Pipelined: answered in order, on the fast path, then closed as the last one asks.
    two = (
        f"GET {base}/a HTTP/1.1\r\nHost: x\r\n\r\nPOST {base}/b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
    )
    answers = await _raw(
        proxy, (two + f"\r\nabcGET {base}/c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").encode()
    )
    assert answers.count(b"HTTP/1.1 200") == 3
    assert answers.index(b"GET /a 0") < answers.index(b"POST /b 3") < answers.index(b"GET /c 0")
    # HTTP/1.0, Expect: 100-continue: the app's; a malformed head: refused before either path.
    old = await _raw(proxy, f"GET {base}/old HTTP/1.0\r\n\r\n".encode())
    assert old.startswith(b"HTTP/1.0 200") and old.endswith(b"GET /old 0")
    bad = await _raw(proxy, f"GET {base}/x HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n".encode())
    assert bad.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert bad.endswith(b"malformed request: Invalid header token\n")
    expect = f"PUT {base}/e HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
    continued = await _raw(proxy, expect.encode(), until=b"100 Continue")
    assert continued.startswith(b"HTTP/1.1 100 Continue")
    # No Host: refused; an encoded service name: the app's, answered as the app does.
    no_host = await _raw(proxy, f"GET {base}/h HTTP/1.1\r\nConnection: close\r\n\r\n".encode())
    assert no_host.startswith(b"HTTP/1.1 400") and no_host.endswith(b"needs one Host header\n")
    encoded = await _raw(
        proxy, b"GET /proxy/services/main/%61pp/z HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert encoded.startswith(b"HTTP/1.1 200") and encoded.endswith(b"GET /z 0")


async def test_the_apps_answers_still_come(harness: Harness, http: aiohttp.ClientSession) -> None:
    run_id = add_service(harness.store, auth=False, model="m")
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    _, proxy = await harness.gateway()
    async with http.get(f"{proxy}/healthz") as reply:
        assert await reply.text() == "ok"
    async with http.get(f"{proxy}/proxy/models/main/v1/models") as reply:
        assert [m["id"] for m in (await reply.json())["data"]] == ["m"]
    async with http.ws_connect(f"{proxy}/proxy/services/main/app/ws") as ws:
        await ws.send_str("hi")
        assert await ws.receive_str(timeout=2) == "one: hi"
    async with http.get(f"{proxy}/proxy/services/main/app/after") as reply:
        assert (await reply.json())["path"] == "/after"


async def test_the_fast_path_can_be_turned_off(harness: Harness, http: aiohttp.ClientSession) -> None:
    run_id = add_service(harness.store, auth=False)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    _, proxy = await harness.gateway(dataclasses.replace(FAST, fast_path=False))
    async with http.get(f"{proxy}/proxy/services/main/app/x") as reply:
        assert (await reply.json())["path"] == "/x"
        assert reply.headers["Connection"] == "close"  # the app's answer: one request a connection
