"""Which replica gets a request, with what path and headers; unknown services; retries."""

from __future__ import annotations

import socket
from collections import Counter

import aiohttp
from aiohttp import web
from yarl import URL

from tests.gateway.conftest import Harness, add_replica, add_service, bearer


async def test_requests_are_balanced_across_the_ready_replicas(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    run_id = add_service(harness.store, auth=False)
    one, two = await harness.replica("one"), await harness.replica("two")
    add_replica(harness.store, run_id, "r-0", one.url)
    add_replica(harness.store, run_id, "r-1", two.url)
    _, proxy = await harness.gateway()
    seen: Counter[str] = Counter()
    for _ in range(10):
        async with http.get(f"{proxy}/proxy/services/main/app/hello") as response:
            assert response.status == 200
            seen[(await response.json())["replica"]] += 1
    assert seen == {"one": 5, "two": 5}  # sequential requests: round robin between idle replicas


async def test_only_ready_replicas_get_requests(harness: Harness, http: aiohttp.ClientSession) -> None:
    run_id = add_service(harness.store, auth=False)
    replicas = {state: await harness.replica(state) for state in ("ready", "probing", "unready", "draining")}
    for number, (state, replica) in enumerate(replicas.items()):
        add_replica(harness.store, run_id, f"r-{number}", replica.url, state=state)
    _, proxy = await harness.gateway()
    for _ in range(8):
        async with http.get(f"{proxy}/proxy/services/main/app/") as response:
            assert (await response.json())["replica"] == "ready"
    assert [len(r.requests) for r in replicas.values()] == [8, 0, 0, 0]


async def test_strip_prefix_sends_the_rest_of_the_path(harness: Harness, http: aiohttp.ClientSession) -> None:
    stripped = add_service(harness.store, "stripped", auth=False)
    whole = add_service(harness.store, "whole", auth=False, strip_prefix=False)
    replica = await harness.replica("one")
    add_replica(harness.store, stripped, "s-0", replica.url)
    add_replica(harness.store, whole, "w-0", replica.url)
    _, proxy = await harness.gateway()

    url = URL(f"{proxy}/proxy/services/main/stripped/a/b%20c?x=1&y=%2F", encoded=True)  # as it is
    async with http.post(url, data=b"hi") as response:
        seen = await response.json()
    assert (seen["path"], seen["method"], seen["body"]) == ("/a/b%20c?x=1&y=%2F", "POST", "hi")
    assert seen["headers"]["X-Forwarded-Prefix"] == "/proxy/services/main/stripped"

    async with http.get(f"{proxy}/proxy/services/main/whole/a?x=1") as response:
        seen = await response.json()
    assert seen["path"] == "/proxy/services/main/whole/a?x=1"
    assert "X-Forwarded-Prefix" not in seen["headers"]


async def test_headers_on_the_way(harness: Harness, http: aiohttp.ClientSession) -> None:
    run_id = add_service(harness.store, auth=False)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    _, proxy = await harness.gateway()
    headers = {"Connection": "keep-alive, X-Private", "X-Private": "hop", "X-Custom": "kept", "Cookie": "a=b"}
    async with http.get(f"{proxy}/proxy/services/main/app/", headers=headers) as response:
        assert (
            "Transfer-Encoding" not in response.headers or response.headers["Transfer-Encoding"] == "chunked"
        )
        seen = (await response.json())["headers"]
    assert seen["Host"] == replica.url.removeprefix("http://")
    assert seen["X-Forwarded-Host"] == proxy.removeprefix("http://")
    assert seen["X-Forwarded-For"] == "127.0.0.1"
    assert seen["X-Forwarded-Proto"] == "http"
    assert (seen["X-Custom"], seen["Cookie"]) == ("kept", "a=b")
    assert "X-Private" not in seen  # named by Connection: hop-by-hop
    assert "Accept-Encoding" in seen or "User-Agent" in seen  # the client's own, passed as they were


async def test_unknown_service_and_the_slash_redirect(harness: Harness, http: aiohttp.ClientSession) -> None:
    add_service(harness.store, auth=False)
    _, proxy = await harness.gateway()
    async with http.get(f"{proxy}/proxy/services/main/nope/x") as response:
        assert response.status == 404
        assert (
            await response.text()
        ).strip() == "no running service main/nope on this proxy (see `ferry ps`)"
    async with http.get(f"{proxy}/proxy/services/main/app?q=1", allow_redirects=False) as response:
        assert response.status == 308
        assert response.headers["Location"] == "/proxy/services/main/app/?q=1"
    async with http.get(f"{proxy}/healthz") as response:
        assert (response.status, await response.text()) == (200, "ok")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_refused_connection_is_retried_on_another_replica(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    run_id = add_service(harness.store)
    replica = await harness.replica("alive")
    add_replica(harness.store, run_id, "r-0", f"http://127.0.0.1:{_closed_port()}")
    add_replica(harness.store, run_id, "r-1", replica.url)
    _, proxy = await harness.gateway()
    for _ in range(4):  # half of them pick the dead one first
        async with http.get(f"{proxy}/proxy/services/main/app/", headers=bearer()) as response:
            assert response.status == 200
            assert (await response.json())["replica"] == "alive"
        async with http.post(f"{proxy}/proxy/services/main/app/", data=b"x", headers=bearer()) as response:
            assert response.status == 200  # refused: the replica never saw it, so even a POST is safe
    assert len(replica.requests) == 8


async def test_a_replica_that_cannot_be_reached_gives_502(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    run_id = add_service(harness.store, auth=False)
    add_replica(harness.store, run_id, "r-0", f"http://127.0.0.1:{_closed_port()}")
    _, proxy = await harness.gateway()
    async with http.get(f"{proxy}/proxy/services/main/app/") as response:
        assert response.status == 502
        text = await response.text()
    assert text.startswith("replica http://127.0.0.1:") and "of main/app failed before answering" in text


async def test_head_and_bodiless_answers(harness: Harness, http: aiohttp.ClientSession) -> None:
    async def no_content(_request: web.Request) -> web.Response:
        return web.Response(status=204, headers={"X-Done": "yes"})

    async def page(_request: web.Request) -> web.Response:
        return web.Response(text="x" * 1000)

    app = web.Application()
    app.router.add_delete("/thing", no_content)
    app.router.add_get("/page", page)  # GET and HEAD
    url = await harness.app(app)
    run_id = add_service(harness.store, auth=False)
    add_replica(harness.store, run_id, "r-0", url)
    _, proxy = await harness.gateway()
    async with http.head(f"{proxy}/proxy/services/main/app/page") as response:
        assert (response.status, response.headers["Content-Length"]) == (200, "1000")
        assert await response.read() == b""
    async with http.get(f"{proxy}/proxy/services/main/app/page") as response:
        assert (response.headers["Content-Length"], await response.text()) == ("1000", "x" * 1000)
    async with http.delete(f"{proxy}/proxy/services/main/app/thing") as response:
        assert (response.status, response.headers["X-Done"], await response.read()) == (204, "yes", b"")
