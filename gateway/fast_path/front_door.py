"""The proxy's listening socket: the fast path in front, the aiohttp app behind it for everything else.

`FrontSite` is an aiohttp site (so `AppRunner.cleanup` stops it as any other) whose connections start on
the fast path (gateway.fast_path.connection.ClientConnection), which checks every request head and hands a
connection over to the app's own protocol when a request is not for it. With `GatewayOptions.fast_path`
off it hands every request over, once its head has passed the same checks.

The FrontDoor keeps what every fast-path connection shares (the routing table, balancer, token cache,
request counts, rate limiter, the pool of replica connections), the set of open connections and those
whose head is still coming. Idle connections are closed after KEEPALIVE seconds, and at shutdown, idle
ones at once (the site's stop), busy ones once their request is over, given the runner's shutdown_timeout
(`finish_shutdown`, from the app's cleanup) before they are cut. Past `max_slow_heads` heads still coming,
the connection whose head began first is refused (gateway.rules.TOO_MANY_SLOW_HEADS): a flood of slow
clients costs each of them its connection, not everyone else their latency.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from time import monotonic

from aiohttp import web

from gateway.balancer import Balancer
from gateway.directory import Directory
from gateway.fast_path.connection import ClientConnection
from gateway.fast_path.replica_pool import ReplicaPool
from gateway.options import GatewayOptions
from gateway.rate_limits import RateLimiter
from gateway.request_stats import RequestStats
from gateway.rules import TOO_MANY_SLOW_HEADS
from gateway.tokens import TokenChecker

KEEPALIVE = 75.0  # seconds an idle client connection is kept (nginx's keepalive_timeout)
_SWEEP_EVERY = 5.0


class FrontDoor:
    def __init__(
        self,
        directory: Directory,
        balancer: Balancer,
        tokens: TokenChecker,
        stats: RequestStats,
        options: GatewayOptions,
        rate_limiter: RateLimiter,
    ) -> None:
        self.directory = directory
        self.rate_limiter = rate_limiter
        self.balancer = balancer
        self.tokens = tokens
        self.stats = stats
        self.options = options
        self.pool = ReplicaPool(options.connect_timeout)
        self._connections: set[ClientConnection] = set()
        self._slow_heads: dict[ClientConnection, None] = {}  # oldest first
        self._sweeping: asyncio.TimerHandle | None = None
        self._stopping_at: float | None = None  # loop time of the shutdown's start

    def protocol_factory(self, fallback: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """Protocols for the listening socket: fast-path connections that hand over to `fallback`'s."""
        return lambda: ClientConnection(self, fallback)

    def opened(self, connection: ClientConnection) -> None:
        if self._stopping_at is not None:
            connection.close()
            return
        self._connections.add(connection)
        if self._sweeping is None:
            self._sweeping = asyncio.get_running_loop().call_later(_SWEEP_EVERY, self._sweep)

    def closed(self, connection: ClientConnection) -> None:
        self._connections.discard(connection)

    def head_started(self, connection: ClientConnection) -> None:
        """A connection's head did not come whole: counted until it does (or the connection ends)."""
        self._slow_heads[connection] = None
        if len(self._slow_heads) > self.options.max_slow_heads:
            next(iter(self._slow_heads)).refuse(TOO_MANY_SLOW_HEADS)

    def head_ended(self, connection: ClientConnection) -> None:
        self._slow_heads.pop(connection, None)

    def slow_heads(self) -> int:
        """Connections whose head is still coming."""
        return len(self._slow_heads)

    def busy(self) -> int:
        """Connections with a request in flight."""
        return sum(1 for c in self._connections if c.busy)

    def begin_shutdown(self) -> None:
        """Idle connections closed now; busy ones once their request is over."""
        self._stopping_at = asyncio.get_running_loop().time()
        for connection in list(self._connections):
            connection.shut_down()

    async def finish_shutdown(self, timeout: float) -> None:
        """Waits for the requests in flight, up to `timeout` after the shutdown began; cuts what is left."""
        loop = asyncio.get_running_loop()
        deadline = (self._stopping_at if self._stopping_at is not None else loop.time()) + timeout
        while self._connections and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self._connections):
            connection.abort()
        self._connections.clear()
        if self._sweeping is not None:
            self._sweeping.cancel()
            self._sweeping = None
        self.pool.close()

    def _sweep(self) -> None:
        self._sweeping = None
        loop = asyncio.get_running_loop()
        too_old = monotonic() - KEEPALIVE
        for connection in list(self._connections):
            if not connection.busy and 0 < connection.idle_since < too_old:
                connection.close()
        if self._connections:
            self._sweeping = loop.call_later(_SWEEP_EVERY, self._sweep)


class FrontSite(web.BaseSite):
    """A TCP site whose connections start on the fast path (without a door: the app's alone, as tests of
    the app itself use it)."""

    __slots__ = ("_door", "_host", "_port", "_bound_port", "_reuse_address", "_reuse_port", "_ssl_context")

    def __init__(
        self,
        runner: web.BaseRunner,
        door: FrontDoor | None,
        host: str,
        port: int,
        *,
        backlog: int = 128,
        reuse_address: bool | None = None,
        reuse_port: bool | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        # TLS (docs/deployment.md#https-on-a-domain): the event loop's TLS transport hands the fast path
        # the decrypted bytes, so it reads heads and hands over to the app as on plain HTTP.
        self._ssl_context = ssl_context
        self._door = door
        self._host = host
        self._port = port
        self._bound_port: int | None = None
        self._reuse_address = reuse_address
        self._reuse_port = reuse_port

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        return self._bound_port if self._bound_port is not None else self._port

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        factory = server if self._door is None else self._door.protocol_factory(server)
        self._server = await asyncio.get_running_loop().create_server(
            factory,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
            ssl=self._ssl_context,
        )
        self._bound_port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._door is not None:
            self._door.begin_shutdown()
        await super().stop()
