"""The proxy as a hostile client finds it: raw-socket requests against two real proxies (the fast path in
front, and one with `fast_path` off, which hands every request to the aiohttp app) in front of real
replicas that record what they receive. What the replica saw is asserted, not only the status: no Ferry
token ever reaches one, whatever the service's `auth` (docs/services.md, "Requests the proxy refuses").
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from gateway.app import Gateway
from gateway.rules import MAX_HEAD, MAX_HEADERS
from tests.gateway.conftest import FAST, TOKEN, Harness, add_replica, add_service


@dataclass
class Recorder:
    """A replica that answers 200 with what it got, and keeps every request's raw head lines and body."""

    seen: list[dict[str, Any]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.record)
        return app

    async def record(self, request: web.Request) -> web.Response:
        body = await request.read()
        seen = {
            "method": request.method,
            "path": request.raw_path,
            "headers": [
                (name.decode("latin-1"), value.decode("latin-1")) for name, value in request.raw_headers
            ],
            "body": body.decode("latin-1"),
        }
        self.seen.append(seen)
        return web.json_response(seen)

    def saw(self, text: str) -> bool:
        """Whether `text` is anywhere in what the replica received, heads and bodies."""
        return text in json.dumps(self.seen)

    def header(self, name: str) -> list[str]:
        """The values of `name` in the last request's head."""
        return [value for key, value in self.seen[-1]["headers"] if key.lower() == name.lower()]


@dataclass
class Proxies:
    harness: Harness
    recorder: Recorder
    fast: Gateway
    fast_url: str
    app_only: Gateway
    app_url: str

    @property
    def both(self) -> list[tuple[str, str]]:
        """(name, base URL) of each proxy: the fast path's and the app's alone."""
        return [("fast path", self.fast_url), ("app", self.app_url)]


@pytest.fixture
async def proxies(harness: Harness) -> AsyncIterator[Proxies]:
    recorder = Recorder()
    url = await harness.app(recorder.app())
    for name, auth, model in (("public", False, None), ("private", True, None), ("llm", False, "m")):
        config: dict[str, Any] = {"auth": auth}
        if model:
            config["model"] = {"name": model, "format": "openai", "prefix": "/v1"}
        run_id = add_service(harness.store, name, **config)
        add_replica(harness.store, run_id, f"r-{name}-0", url)
    options = dataclasses.replace(FAST, head_timeout=1.0, max_slow_heads=20)
    fast, fast_url = await harness.gateway(options)
    app_only, app_url = await harness.gateway(dataclasses.replace(options, fast_path=False))
    yield Proxies(harness, recorder, fast, fast_url, app_only, app_url)


async def exchange(
    base: str, data: bytes | list[bytes], *, pause: float = 0.0, timeout: float = 3.0
) -> bytes:
    """Sends `data` (in these writes, `pause` apart, until the proxy answers) on a new connection; what
    comes back until the proxy closes it."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))

    async def read_all() -> bytes:
        received = b""
        while True:
            try:
                chunk = await reader.read(65536)
            except ConnectionResetError:
                return received
            if not chunk:
                return received
            received += chunk

    reading = asyncio.create_task(read_all())
    try:
        for piece in [data] if isinstance(data, bytes) else data:
            if reading.done():
                break
            try:
                writer.write(piece)
                await writer.drain()
            except (ConnectionResetError, BrokenPipeError):
                break
            if pause:
                await asyncio.sleep(pause)
        received = await asyncio.wait_for(reading, timeout)
    finally:
        reading.cancel()
        writer.close()
    return received


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else 0


def get(path: str, *headers: str, host: str = "proxy.test") -> bytes:
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", *headers, "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


# --- 1. No Ferry token reaches any replica --------------------------------------------------------

TOKEN_FORMS = [f"Bearer {TOKEN}", f"bearer  {TOKEN} ", f"Token {TOKEN}", TOKEN, f"Basic {TOKEN}"]


@pytest.mark.parametrize("authorization", TOKEN_FORMS)
async def test_no_ferry_token_reaches_a_public_service_or_model(proxies: Proxies, authorization: str) -> None:
    for _, base in proxies.both:
        answer = await exchange(base, get("/proxy/services/main/public/x", f"Authorization: {authorization}"))
        assert status_of(answer) == 200
        body = json.dumps({"model": "m", "messages": []})
        chat = (
            "POST /proxy/models/main/v1/chat/completions HTTP/1.1\r\nHost: p\r\n"
            f"Authorization: {authorization}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}"
        )
        answer = await exchange(base, chat.encode())
        assert status_of(answer) == 200
        answer = await exchange(base, get("/proxy/services/main/private/x", f"Authorization: Bearer {TOKEN}"))
        assert status_of(answer) == 200
    assert len(proxies.recorder.seen) == 6
    assert not proxies.recorder.saw(TOKEN)
    assert [s["path"] for s in proxies.recorder.seen[:2]] == ["/x", "/v1/chat/completions"]


async def test_a_public_services_own_key_still_reaches_it(proxies: Proxies) -> None:
    for _, base in proxies.both:
        answer = await exchange(
            base, get("/proxy/services/main/public/x", "Authorization: Bearer sk-its-own")
        )
        assert status_of(answer) == 200
        assert proxies.recorder.header("Authorization") == ["Bearer sk-its-own"]


async def test_two_authorization_headers_are_refused(proxies: Proxies) -> None:
    for _, base in proxies.both:
        for service in ("public", "private"):
            twice = get(
                f"/proxy/services/main/{service}/x",
                f"Authorization: Bearer {TOKEN}",
                "Authorization: Bearer x",
            )
            answer = await exchange(base, twice)
            assert status_of(answer) == 400 and b"more than one Authorization header" in answer
    assert proxies.recorder.seen == []


# --- 2. Absolute-form requests ---------------------------------------------------------------------


async def test_absolute_form_requests_reach_the_replica_with_their_path_and_host(proxies: Proxies) -> None:
    for _, base in proxies.both:
        authority = base.removeprefix("http://")
        target = f"http://{authority}/proxy/services/main/private/api/x?q=%20"
        answer = await exchange(base, get(target, f"Authorization: Bearer {TOKEN}", host="other.test"))
        assert status_of(answer) == 200
        assert proxies.recorder.seen[-1]["path"] == "/api/x?q=%20"
        assert proxies.recorder.header("X-Forwarded-Host") == [authority]
        assert proxies.recorder.header("X-Forwarded-Prefix") == ["/proxy/services/main/private"]


# --- 3. Head limits, however the bytes arrive ------------------------------------------------------


def head_of_size(size: int) -> bytes:
    """A valid request head of exactly `size` bytes, its padding in header lines of 8,000 bytes at most."""
    start = get("/proxy/services/main/public/pad")[:-2]
    left = size - len(start) - 2
    lines = []
    while left > 0:
        value = min(8000, left - len("X-Pad: \r\n"))
        line = f"X-Pad: {'p' * max(value, 1)}\r\n".encode()
        lines.append(line)
        left -= len(line)
    head = start + b"".join(lines) + b"\r\n"
    assert len(head) == size, len(head)
    return head


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def headers(count: int) -> bytes:
    return get("/proxy/services/main/public/many", *(f"X-N{n}: {n}" for n in range(count - 2)))


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (head_of_size(MAX_HEAD), 200),
        (head_of_size(MAX_HEAD + 1), 431),
        (head_of_size(2 * MAX_HEAD), 431),
        (headers(MAX_HEADERS), 200),  # Host and Connection among them
        (headers(MAX_HEADERS + 1), 431),
        (headers(1000), 431),
    ],
    ids=["64KiB", "64KiB+1", "128KiB", "100-headers", "101-headers", "1000-headers"],
)
async def test_head_limits_do_not_depend_on_how_the_bytes_arrive(
    proxies: Proxies, data: bytes, status: int
) -> None:
    for name, base in proxies.both:
        for writes in ([data], pieces(data, 2048), pieces(data, 60_000)):
            answer = await exchange(base, writes)
            assert status_of(answer) == status, (name, len(writes), answer[:200])
    assert len(proxies.recorder.seen) == (6 if status == 200 else 0)


# --- 4. Slow and malformed heads -------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"GET /proxy/services/main/public/x HTTP/1.1\nHost: p\n\n",  # bare LFs
        b"GET /proxy/services/main/public/x HTTP/1.1\r\nHost: p\nX: y\r\n",  # one bare LF, head not ended
        b"GET /proxy/services/main/public/x\r\n",  # HTTP/0.9
        b"GET /proxy/services/main/public/x HTTP/1.1\r\nHost: p\rX: y\r\n",  # a bare CR
        b"GET /" + b"a" * 9000,  # a request line too long, not ended
    ],
)
async def test_a_head_refused_on_its_way_is_answered_at_once(proxies: Proxies, data: bytes) -> None:
    for name, base in proxies.both:
        answer = await exchange(base, data, timeout=5.0)
        assert status_of(answer) in (400, 414), (name, answer)  # not the head timeout's 408
    assert proxies.recorder.seen == []


async def test_a_head_that_does_not_come_in_time_gets_408(proxies: Proxies) -> None:
    answer = await exchange(
        proxies.fast_url, b"GET /proxy/services/main/public/x HTTP/1.1\r\nHo", timeout=5.0
    )
    assert status_of(answer) == 408 and b"did not come within 1 s" in answer


async def test_slow_clients_are_bounded_and_others_are_served(proxies: Proxies) -> None:
    """40 clients trickle their heads a byte every 50 ms at a proxy that keeps 20 heads coming at most
    and gives each 1 s; meanwhile plain requests are answered as usual (how fast is a benchmark's
    business, not this test's)."""
    head = get("/proxy/services/main/public/slow")
    seen_most = 0

    async def trickle() -> int:
        answer = await exchange(proxies.fast_url, pieces(head, 1), pause=0.05, timeout=5.0)
        return status_of(answer)

    async def watch() -> None:
        nonlocal seen_most
        while True:
            seen_most = max(seen_most, proxies.fast.front_door.slow_heads())
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    slow = [asyncio.create_task(trickle()) for _ in range(40)]
    await asyncio.sleep(0.2)
    for _ in range(20):
        answer = await exchange(proxies.fast_url, get("/proxy/services/main/public/quick"))
        assert status_of(answer) == 200
        await asyncio.sleep(0.02)
    statuses = await asyncio.wait_for(asyncio.gather(*slow), 10)
    watcher.cancel()
    assert statuses == [408] * 40  # evicted (the first 20) or timed out: none kept for its whole trickle
    assert seen_most <= 20
    assert proxies.fast.front_door.slow_heads() == 0
    assert not any(s["path"] == "/slow" for s in proxies.recorder.seen)


# --- 5. A malformed chunked body -------------------------------------------------------------------


async def test_a_malformed_chunked_body_is_answered_400_not_reset(proxies: Proxies) -> None:
    request = (
        b"POST /proxy/services/main/public/up HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\nzz\r\nnot hex\r\n0\r\n\r\n"
    )
    split = request.index(b"zz")
    for name, base in proxies.both:
        for writes in ([request], [request[:split], request[split:]]):  # at once, and while forwarding
            answer = await exchange(base, writes, pause=0.2)
            assert status_of(answer) == 400, (name, len(writes), answer)
            assert answer.endswith(b"the chunked body does not follow chunked coding\n")


# --- 6 and 7. Refusals say nothing secret; the 401's words ----------------------------------------


async def test_a_refusal_echoes_no_header_and_the_log_keeps_no_token(
    proxies: Proxies, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for _, base in proxies.both:
        for line in (
            f"Authorization : Bearer {TOKEN}",
            f"Authorization: Bearer {TOKEN}\x01",
            f"X{TOKEN}: \x7f",
        ):
            answer = await exchange(base, get("/proxy/services/main/private/x", line))
            assert status_of(answer) == 400
            assert TOKEN.encode() not in answer
    assert TOKEN not in caplog.text
    assert all(record.exc_info is None for record in caplog.records if record.name.startswith("gateway"))


async def test_the_401_says_what_is_needed_once(proxies: Proxies) -> None:
    for _, base in proxies.both:
        answer = await exchange(base, get("/proxy/services/main/private/x"))
        assert status_of(answer) == 401
        words = "needs a Ferry token: send `Authorization: Bearer <token>` (`ferry token` shows yours)"
        assert answer.endswith(f"main/private {words}\n".encode())
