"""The proxy against a real store (SQLite in tmp_path) and real replicas: aiohttp servers on 127.0.0.1.

Every test runs twice: on asyncio's own event loop and on uvloop's (the proxy's in production: its
transports are not asyncio's classes, and the fast path hands them from protocol to protocol).

Runs and replicas are inserted as the workers would write them; the proxy runs in-process, with short
intervals so that a change in the store reaches its table within a few hundredths of a second.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import uvloop
from aiohttp import web

from gateway.app import Gateway, make_runner
from gateway.options import GatewayOptions
from store.models import RunRecord, ServiceReplicaRecord
from store.opening import open_store
from store.repository import Store

TOKEN = "secret-token-of-alice"
FAST = GatewayOptions(
    refresh_interval=0.02,
    heartbeat_interval=0.2,
    flush_interval=0.1,
    hold_timeout=5.0,
    unknown_token_ttl=0.2,
    shutdown_timeout=1.0,
)


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"sqlite:///{tmp_path}/ferry.db")
    opened.put_user("alice", hashlib.sha256(TOKEN.encode()).hexdigest())
    yield opened
    opened.engine.dispose()


def add_service(
    store: Store, name: str = "app", *, project: str = "main", run_id: str | None = None, **config: Any
) -> str:
    """An active service run of `name` (its configuration: `config` over a minimal one); its run id."""
    run_id = run_id or f"run-{name}"
    configuration = {"type": "service", "port": 8000, "commands": ["serve"], **config}
    store.put_run(
        RunRecord(
            id=run_id,
            project=project,
            run_name=name,
            user="alice",
            type="service",
            status="running",
            configuration=json.dumps(configuration),
            workflow_id=f"ferry/{project}/{name}",
        )
    )
    return run_id


def add_replica(store: Store, run_id: str, replica_id: str, url: str, state: str = "ready") -> None:
    number = int(replica_id.rsplit("-", 1)[-1]) if replica_id[-1].isdigit() else 0
    store.register_replica(
        ServiceReplicaRecord(
            id=replica_id, run_id=run_id, replica_num=number, submission_num=0, url=url, state=state
        )
    )


async def eventually(check: Callable[[], Awaitable[bool] | bool], timeout: float = 3.0) -> None:
    """Waits until `check()` is true, polling every 10 ms; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serves the app on a free port of 127.0.0.1; the runner and the base URL."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


@dataclass
class Replica:
    """A test replica: answers every path with JSON saying who it is and what it got."""

    name: str
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    release_slow: asyncio.Event = field(default_factory=asyncio.Event)
    sent_at: dict[str, float] = field(default_factory=dict)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/sse", self.sse)
        app.router.add_get("/ws", self.websocket)
        app.router.add_route("*", "/slow", self.slow)
        app.router.add_route("*", "/{tail:.*}", self.echo)
        return app

    async def echo(self, request: web.Request) -> web.Response:
        body = await request.text()
        seen = {
            "replica": self.name,
            "method": request.method,
            "path": request.raw_path,
            "headers": dict(request.headers),
            "body": body,
        }
        self.requests.append(seen)
        return web.json_response(seen)

    async def slow(self, request: web.Request) -> web.Response:
        self.requests.append({"replica": self.name, "path": request.raw_path})
        await self.release_slow.wait()
        return web.Response(text=f"slow answer from {self.name}")

    async def sse(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        await response.write(b"data: one\n\n")
        self.sent_at["one"] = loop.time()
        await asyncio.sleep(0.5)
        self.sent_at["two"] = loop.time()
        try:
            await response.write(b"data: two\n\n")
            await response.write_eof()
        except ConnectionResetError:
            self.sent_at["cut"] = loop.time()  # the proxy hung up: its client left
        return response

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=("echo.v1",))
        await ws.prepare(request)
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                if message.data == "close please":
                    await ws.close(code=4001, message=b"asked to")
                    break
                await ws.send_str(f"{self.name}: {message.data}")
            elif message.type == aiohttp.WSMsgType.BINARY:
                await ws.send_bytes(message.data[::-1])
        return ws


@dataclass
class Harness:
    store: Store
    runners: list[web.AppRunner] = field(default_factory=list)

    async def replica(self, name: str) -> Replica:
        replica = Replica(name)
        runner, replica.url = await serve(replica.app())
        self.runners.append(runner)
        return replica

    async def app(self, app: web.Application) -> str:
        runner, url = await serve(app)
        self.runners.append(runner)
        return url

    async def gateway(self, options: GatewayOptions = FAST) -> tuple[Gateway, str]:
        gateway = Gateway(self.store, public_url="http://proxy.test:8300", options=options)
        runner = make_runner(gateway)
        await runner.setup()
        site = gateway.site(runner, "127.0.0.1", 0)
        await site.start()
        self.runners.append(runner)
        host, port = runner.addresses[0][:2]
        return gateway, f"http://{host}:{port}"


@pytest.fixture
async def harness(store: Store) -> AsyncIterator[Harness]:
    harness = Harness(store)
    yield harness
    for runner in reversed(harness.runners):
        await runner.cleanup()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
