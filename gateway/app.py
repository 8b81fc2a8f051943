"""The proxy assembled: its parts, their start and stop, and the aiohttp application that serves them.

`Gateway(store, public_url=...)` owns one directory (the routing table), balancer, drainer, request
counter, token cache, rate limiter (gateway.rate_limits), client session and front door
(gateway.fast_path.front_door: the fast path, with its pool of replica connections);
`gateway.application()` is the aiohttp app, served by `gateway.site(runner, ...)`: plain requests on the
fast path, the rest by the app. Starting the app (runner.setup) reads the table once and records the
proxy in the store, so the first request finds its service. Stopping (runner.cleanup): held requests are
answered 503 at once, those in flight (on the fast path too) get the runner's shutdown_timeout to
finish, then the last counts are written and the proxy's record removed.
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import AsyncIterator

from aiohttp import web

from gateway.access import Access
from gateway.balancer import Balancer
from gateway.codec_endpoint import CodecEndpoint
from gateway.directory import Directory
from gateway.draining import Drainer
from gateway.fast_path.front_door import FrontDoor, FrontSite
from gateway.forwarding import Forwarder
from gateway.host_routing import host_routing
from gateway.models_api import ModelsApi
from gateway.options import GatewayOptions
from gateway.rate_limits import RateLimiter
from gateway.request_stats import RequestStats
from gateway.rules import MAX_HEAD, MAX_HEADERS
from gateway.services_api import ServicesApi
from gateway.tokens import TokenChecker
from store.repository import Store

# The largest body read whole (a model request's JSON, to find its `model`); others stream at any size.
MAX_READ_BODY = 64 * 1024 * 1024


class Gateway:
    def __init__(
        self,
        store: Store,
        *,
        public_url: str,
        options: GatewayOptions | None = None,
        gateway_id: str | None = None,
    ) -> None:
        self.id = gateway_id or str(uuid.uuid4())
        self.options = options or GatewayOptions()
        self.public_url = public_url
        self.balancer = Balancer()
        self.drainer = Drainer(store, self.id, self.balancer)
        self.directory = Directory(store, self.id, public_url, self.options, self.drainer)
        self.stats = RequestStats(store, self.id, self.options)
        self.tokens = TokenChecker(store, self.options)
        # The services' rate limits, this process's share of them (docs/services.md#rate-limits).
        self.rate_limiter = RateLimiter(workers=self.options.workers)
        self.forwarder = Forwarder(self.directory, self.balancer, self.stats, self.options, self.rate_limiter)
        self.front_door = FrontDoor(
            self.directory, self.balancer, self.tokens, self.stats, self.options, self.rate_limiter
        )
        access = Access(self.directory, self.tokens)
        self._services = ServicesApi(access, self.forwarder)
        self._models = ModelsApi(access, self.forwarder)

    def application(self) -> web.Application:
        middlewares = []
        if self.options.domain is not None:  # docs/deployment.md#https-on-a-domain
            middlewares.append(host_routing(self.options.domain, self._services, self._models))
        app = web.Application(client_max_size=MAX_READ_BODY, middlewares=middlewares)
        app.router.add_get("/healthz", _healthz)
        self._services.add_routes(app.router)
        self._models.add_routes(app.router)
        CodecEndpoint().add_routes(app.router)  # the Web UI's decoder of sealed payloads (docs/secrets.md)
        app.cleanup_ctx.append(self._running)
        app.on_shutdown.append(self._shutting_down)
        app.on_response_prepare.append(_one_request_per_connection)
        return app

    async def start(self) -> None:
        await self.forwarder.start()
        try:
            await self.directory.start()
        except BaseException:
            await self.forwarder.stop()
            raise
        self.stats.start()

    async def stop(self) -> None:
        self.directory.close_waiters()
        await self.stats.stop()
        await self.drainer.stop()
        await self.directory.stop()
        await self.forwarder.stop()

    def site(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        backlog: int = 128,
        reuse_address: bool | None = None,
        reuse_port: bool | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> FrontSite:
        """The site to serve the app (`make_runner`'s) on: the front door's checks and fast path in front;
        TLS with `ssl_context` (gateway.tls)."""
        return FrontSite(
            runner,
            self.front_door,
            host,
            port,
            backlog=backlog,
            reuse_address=reuse_address,
            reuse_port=reuse_port,
            ssl_context=ssl_context,
        )

    async def _running(self, _app: web.Application) -> AsyncIterator[None]:
        await self.start()
        yield
        await self.front_door.finish_shutdown(self.options.shutdown_timeout)
        await self.stop()

    async def _shutting_down(self, _app: web.Application) -> None:
        self.directory.close_waiters()  # held requests: 503 now, not at the shutdown timeout


async def _one_request_per_connection(_request: web.Request, response: web.StreamResponse) -> None:
    """A connection handed to the app carries one request: its answer closes it, so that the next
    request's head is read by the front door again, held to the same limits and timeout
    (gateway.fast_path.connection). A WebSocket's connection carries no other request anyway."""
    if not isinstance(response, web.WebSocketResponse):
        response.force_close()
        response.headers["Connection"] = "close"  # aiohttp may have written its headers' keep-alive already


async def _healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_runner(gateway: Gateway) -> web.AppRunner:
    """A runner for the gateway's app: no access log (it costs each request), handlers cancelled when
    their client goes away (a held request stops waiting; a replica stops streaming to no one)."""
    return web.AppRunner(
        gateway.application(),
        handle_signals=False,
        access_log=None,
        shutdown_timeout=gateway.options.shutdown_timeout,
        handler_cancellation=True,
        # The front door has held each head to gateway.rules' limits: aiohttp's own must not be stricter.
        max_line_size=MAX_HEAD,
        max_field_size=MAX_HEAD,
        max_headers=MAX_HEADERS + 1,
    )
