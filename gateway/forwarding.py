"""Forwarding one request to a ready replica, and its answer back, streamed both ways.

- Limiting: a request over one of the service's `rate_limits` is answered 429 at once, before a replica
  is chosen or waited for (gateway.rate_limits, docs/services.md#rate-limits).
- Choosing: the balancer picks a ready replica of the service in the current table. If the service has
  none (its replica is starting, or it is scaled to zero) the request is HELD for up to `hold_timeout`
  (120 s by default, `--hold-timeout`) until one is ready, then forwarded; the request counts are flushed
  at once so that the autoscaler sees the demand. After the timeout: 503.
- Sending: the body streams to the replica as it arrives (no buffering); the response streams back chunk
  by chunk as the replica writes it (server-sent events arrive token by token), uncompressed and unchanged
  (the client does not decompress). Without a Content-Length from the replica the answer is chunked. An
  answer with a small Content-Length (<= 64 KiB) is read whole first, then sent with its headers in one
  write: one packet and one wake-up of the client instead of two (its body was of no use to the client
  before its last byte anyway).
- Retrying: if no answer came back and nothing of the request can have been acted on, the request is
  sent once more, to another ready replica: after a refused connection (the replica never saw it), and
  after a lost connection for a request that is idempotent (GET, HEAD, OPTIONS, PUT, DELETE) or has no
  body, provided the body can be sent again.
- Failing: a replica that cannot be reached, or fails before its answer began (or within a small answer
  read whole), gives 502 with a body that says so; one that fails mid-answer has the client's connection
  cut, so the answer is not taken as whole.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from aiohttp import web
from yarl import URL

from gateway.balancer import Balancer
from gateway.directory import Directory
from gateway.headers import downstream_headers, is_websocket_upgrade, upstream_headers
from gateway.options import GatewayOptions
from gateway.rate_limits import RateLimiter, RateLimitRule, request_path, too_many_requests
from gateway.replies import ErrorReply
from gateway.request_stats import RequestStats
from gateway.routing_table import Replica, Service
from gateway.rules import SMALL_ANSWER, failed_message, may_resend
from gateway.websocket_proxy import proxy_websocket

log = logging.getLogger(__name__)

# Errors that may come before any byte of an answer: the request may then be retried.
_BEFORE_ANSWER = (aiohttp.ClientError, TimeoutError, OSError)
_NOT_REACHED = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)  # the replica never saw it
_MID_ANSWER = (aiohttp.ClientError, TimeoutError, OSError)
# Statuses whose answers have no body whatever their headers say (and HEAD's): streamed as they are.
_NO_BODY = frozenset({204, 304})


class Forwarder:
    def __init__(
        self,
        directory: Directory,
        balancer: Balancer,
        stats: RequestStats,
        options: GatewayOptions,
        rate_limiter: RateLimiter,
    ) -> None:
        self._directory = directory
        self._rate_limiter = rate_limiter
        self._balancer = balancer
        self._stats = stats
        self._options = options
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=0,  # no pool limit: the replicas' own capacity decides
            keepalive_timeout=4.0,  # under common servers' idle timeouts (uvicorn and vLLM: 5 s)
            enable_cleanup_closed=True,
            ttl_dns_cache=10,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._options.connect_timeout),
            raise_for_status=False,
        )

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def forward(
        self,
        request: web.Request,
        service: Service,
        path: str,
        errors: ErrorReply,
        *,
        body: bytes | None = None,
        stripped_prefix: str | None = None,
        forward_authorization: bool = False,
    ) -> web.StreamResponse:
        """Forwards the request to `path` (with its query) on a ready replica of the service.

        `body`: the request's body when the caller has read it already; else it streams from the client.
        `forward_authorization`: whether the replica gets the Authorization header (gateway.rules).
        """
        if service.settings.rate_limits:
            over = self._over_rate_limit(request, service, path, stripped_prefix)
            if over is not None:
                return errors(429, too_many_requests(f"{service.project}/{service.run_name}", over))
        # Counted for the autoscaler only once past the limits: a refused request asks for no replica.
        self._stats.count(service.run_id)
        chosen = await self._choose(service, errors)
        if isinstance(chosen, web.StreamResponse):
            return chosen
        replica = chosen
        session = self._session
        assert session is not None, "Forwarder.start was not called"
        try:
            websocket = is_websocket_upgrade(request)
            headers = upstream_headers(
                request,
                drop_authorization=not forward_authorization,
                stripped_prefix=stripped_prefix,
                websocket=websocket,
            )
            if websocket:
                return await proxy_websocket(request, session, URL(replica.url + path, encoded=True), headers)
            data = body if body is not None else request.content if request.body_exists else None
            retried = False
            while True:
                try:
                    upstream = await session.request(
                        request.method,
                        URL(replica.url + path, encoded=True),
                        headers=headers,
                        data=data,
                        allow_redirects=False,
                    )
                    break
                except _BEFORE_ANSWER as err:
                    alternative = (
                        None if retried else self._retry_target(request, service, replica, data, err)
                    )
                    if alternative is None:
                        log.info("replica %s failed before answering: %r", replica.id, err)
                        return errors(502, failed_message(service, replica.url, err, "before answering"))
                    retried = True
                    self._balancer.acquire(alternative.id)
                    self._balancer.release(replica.id)
                    replica = alternative
            try:
                length = upstream.content_length
                if (
                    length is not None
                    and length <= SMALL_ANSWER
                    and upstream.status not in _NO_BODY
                    and request.method != "HEAD"
                ):
                    return await _whole(upstream, replica, service, errors)
                return await _relay(request, upstream, replica)
            finally:
                upstream.release()
        finally:
            self._balancer.release(replica.id)

    def _over_rate_limit(
        self, request: web.Request, service: Service, path: str, stripped_prefix: str | None
    ) -> RateLimitRule | None:
        """The limit the request is over, or None (it has taken its token). A prefix is matched against
        the path within the service: `path` less the service's own path where the replica gets it whole
        (strip_prefix: false), as it is for a model's request (its replica's path)."""
        if stripped_prefix is None and path.startswith(service.path):
            path = path[len(service.path) - 1 :]
        headers = request.headers

        def header(name: str) -> bytes | None:
            value = headers.get(name)
            # aiohttp decodes a head's bytes with surrogateescape: the fast path's raw bytes, back again.
            return None if value is None else value.encode("utf-8", "surrogateescape").strip(b" \t")

        return self._rate_limiter.refusal(
            service.run_id,
            service.settings.rate_limits,
            request_path(path.encode("utf-8", "surrogateescape")),
            (request.remote or "").encode(),
            header,
        )

    async def _choose(self, service: Service, errors: ErrorReply) -> Replica | web.Response:
        """A ready replica, acquired (the caller releases it), held for if need be; or the answer why not.

        Reads the table again after every wait: the service's replicas may have changed meanwhile.
        """
        key = service.key
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        hold = self._options.hold_timeout
        while True:
            current = self._directory.table.services.get(key)
            if current is None:
                return errors(503, f"service {service.project}/{service.run_name} is no longer running")
            replica = self._balancer.pick(current)
            if replica is not None:
                self._balancer.acquire(replica.id)
                return replica
            if self._directory.closing:
                return errors(503, "the proxy is shutting down; try again")
            now = loop.time()
            if deadline is None:
                deadline = now + hold
                self._stats.flush_soon()  # the autoscaler must see the demand now (a service at zero)
            elif now >= deadline:
                return errors(
                    503,
                    f"no replica of {service.project}/{service.run_name} became ready within {hold:g} s "
                    f"(the proxy holds a request that long for a replica to start; try again later)",
                )
            await self._directory.wait_for_ready(key, deadline - now)

    def _retry_target(
        self, request: web.Request, service: Service, failed: Replica, data: object, err: BaseException
    ) -> Replica | None:
        """Where to send the request once more, if it may be sent again at all."""
        not_reached = isinstance(err, _NOT_REACHED)
        body_kept = data is None or isinstance(data, bytes)  # a stream is spent once read
        if not may_resend(request.method, data is not None, body_kept, reached=not not_reached):
            return None
        current = self._directory.table.services.get(service.key)
        if current is None:
            return None
        alternative = self._balancer.pick(current, exclude=(failed.id,))
        if alternative is None and not not_reached and any(r.id == failed.id for r in current.ready):
            return failed  # the only one: a kept-alive connection it had closed, most likely
        return alternative


async def _whole(
    upstream: aiohttp.ClientResponse, replica: Replica, service: Service, errors: ErrorReply
) -> web.Response:
    """The replica's small answer, read whole: aiohttp writes it with its headers in one go."""
    try:
        body = await upstream.read()
    except _MID_ANSWER as err:
        log.warning("replica %s failed mid-answer: %r", replica.id, err)
        return errors(502, failed_message(service, replica.url, err, "mid-answer"))
    return web.Response(
        status=upstream.status,
        reason=upstream.reason,
        headers=downstream_headers(upstream.headers),
        body=body,
    )


async def _relay(
    request: web.Request, upstream: aiohttp.ClientResponse, replica: Replica
) -> web.StreamResponse:
    """The replica's answer, streamed to the client as it comes."""
    response = web.StreamResponse(
        status=upstream.status, reason=upstream.reason, headers=downstream_headers(upstream.headers)
    )
    await response.prepare(request)
    try:
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
    except _MID_ANSWER as err:
        if request.transport is None or request.transport.is_closing():
            return response  # the client went away: nothing to tell it (its handler ends here)
        log.warning("replica %s failed mid-answer: %r", replica.id, err)
        response.force_close()
        request.transport.abort()  # a cut answer must not look whole (no last chunk)
        return response
    await response.write_eof()
    return response
