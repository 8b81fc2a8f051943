"""The proxy's client side: one ClientConnection (an asyncio protocol) per connection to the proxy.

Every request head is first held to the proxy's limits (gateway.fast_path.head_checks, gateway.rules) and read
(gateway.fast_path.heads, with httptools): a head refused is answered at once (400, 408, 414, 431, 505) and
the connection closed; one that does not come whole within the head timeout gets 408, as does the one
waiting longest when too many heads are still coming. Then it is routed (gateway.fast_path.routing.route).
A plain HTTP/1.1 request for a service with a ready replica, from a client whose token is good (when the
service has `auth`), is held to the service's rate limits (gateway.rate_limits: one over them goes to
the app, which answers 429), counted, given a replica by the balancer and forwarded by an Exchange
(gateway.fast_path.exchange). Anything else is handed to the aiohttp app, with the bytes received so far: the
connection's transport gets aiohttp's own protocol (`transport.set_protocol`), which serves this one
request (`/healthz`, the models API, 404, 401, held requests, WebSockets, HTTP/1.0) and closes the
connection after it (gateway.app), so that every head on every connection passes through here.

A token not in the token cache is looked up (reading stays as it is; requests wait in the buffer); a
token that is not good, or a lookup that fails, goes to the app, which answers 401 or 503. A public
service's replica gets the Authorization header only once the token cache says it carries no Ferry token.
Requests on one connection are served one at a time, in order (pipelined ones wait in the buffer). An
idle connection is closed after KEEPALIVE seconds, and at the proxy's shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from time import monotonic
from typing import cast

from gateway.fast_path.app_connection import AppConnection, body_framing
from gateway.fast_path.door import Door
from gateway.fast_path.exchange import Exchange
from gateway.fast_path.head_checks import HeadScan, whole_head_refusal
from gateway.fast_path.heads import RequestHead, parse_request_head
from gateway.fast_path.routing import route
from gateway.rate_limits import request_path
from gateway.routing_table import Service
from gateway.rules import MAX_HEAD, ProxyRefusal, refusal_bytes, slow_head_refusal
from gateway.tokens import bearer_token, carried_token

log = logging.getLogger(__name__)

# Why a client connection's reading is paused (a bit each): its requests waiting in the buffer are enough
# (and gateway.fast_path.exchange.PAUSED_FOR_REPLICA: the replica cannot take the body as fast as it comes).
PAUSED_FOR_BUFFER = 1
# Seconds a refused connection keeps reading (and dropping) what the client still sends, so that it reads
# the refusal before the close (a close with unread bytes would reset the connection: RFC 9112 9.6).
LINGER = 2.0


class ClientConnection(asyncio.Protocol):
    def __init__(self, door: Door, fallback: Callable[[], asyncio.Protocol]) -> None:
        self.door = door
        self._fallback = fallback
        self.transport: asyncio.Transport | None = None
        self.address = b""  # the client's IP address, for X-Forwarded-For
        self.scheme = b"http"  # b"https" on the TLS listener, for X-Forwarded-Proto
        self.exchange: Exchange | None = None
        self.idle_since = 0.0  # time.monotonic(); 0 while a request is in flight
        self.closed = False
        self.close_when_idle = False  # the proxy is shutting down
        self._buffer = b""  # received, not yet served: the next requests (bytes: most often one whole head)
        self.paused = 0  # why reading is paused, a bit per reason
        self._token_lookup: asyncio.Task[None] | None = None
        self._looked_up: str | None = None  # the token last looked up for this connection
        self._scan: HeadScan | None = None  # the head still coming, if it did not come whole
        self._head_timer: asyncio.TimerHandle | None = None
        self.head_since = 0.0  # loop time of the first byte of the head still coming
        self._refused = False  # answered a refusal: what the client still sends is dropped

    @property
    def busy(self) -> bool:
        return self.exchange is not None or self._token_lookup is not None

    # --- asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport's kin
        peer = self.transport.get_extra_info("peername")
        self.address = str(peer[0]).encode() if isinstance(peer, tuple) and peer else b""
        if self.transport.get_extra_info("sslcontext") is not None:
            self.scheme = b"https"
        self.idle_since = monotonic()
        self.door.opened(self)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        exchange = self.exchange
        if exchange is not None:
            if not exchange.request_complete:
                data = exchange.client_data(data)
                if not data:
                    return
        elif self._token_lookup is None and not self._buffer:  # a new request, most often whole
            self._buffer = data
            self._serve_next()
            return
        self._buffer = self._buffer + data if self._buffer else data
        if not self.busy:
            self._serve_next()
        elif len(self._buffer) > MAX_HEAD:
            self.set_paused(PAUSED_FOR_BUFFER, True)

    def eof_received(self) -> bool:
        return False  # the client is done: the transport closes (a request in flight is let go)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        self.door.closed(self)
        if self._scan is not None:
            self._head_over()
        if self._token_lookup is not None:
            self._token_lookup.cancel()
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.client_lost()

    def pause_writing(self) -> None:
        if self.exchange is not None:
            self.exchange.client_writing_paused(True)

    def resume_writing(self) -> None:
        if self.exchange is not None:
            self.exchange.client_writing_paused(False)

    # --- used by the exchange and the front door -------------------------------------------------

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def set_paused(self, reason: int, paused: bool) -> None:
        before = self.paused
        self.paused = before | reason if paused else before & ~reason
        if self.transport is None or self.closed or bool(before) == bool(self.paused):
            return
        with contextlib.suppress(RuntimeError):  # a transport already closing
            if self.paused:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def abort(self) -> None:
        """Cuts the connection: an answer cut short must not look whole to the client."""
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()

    def exchange_done(self, close: bool) -> None:
        """The exchange in flight is over; `close`: the connection cannot carry another request."""
        self.exchange = None
        if self.closed:
            return
        if close or self.close_when_idle:
            self.close()
            return
        self.idle_since = monotonic()
        if self.paused:
            self.set_paused(PAUSED_FOR_BUFFER, False)
        if self._buffer:
            self._serve_next()

    def shut_down(self) -> None:
        """The proxy stops: closed now if idle, else once its request in flight is over."""
        self.close_when_idle = True
        if not self.busy:
            self.close()

    # --- requests ---------------------------------------------------------------------------------

    def _serve_next(self) -> None:
        """Starts on the next request in the buffer, if its head is whole (no request is in flight)."""
        if self.close_when_idle or self.closed:
            self.close()
            return
        buffer = self._buffer
        if buffer[:2] == b"\r\n":  # empty lines before a request line are ignored (RFC 9112 2.2)
            buffer = self._buffer = buffer.lstrip(b"\r\n")
            if not buffer:
                return
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            self._head_coming(buffer)
            return
        if self._scan is not None:
            self._head_over()
        head_end = end + 4
        head_bytes = buffer if head_end == len(buffer) else buffer[:head_end]
        refusal = whole_head_refusal(head_bytes)
        head = parse_request_head(head_bytes) if refusal is None else refusal
        if isinstance(head, ProxyRefusal):
            self.refuse(head)
            return
        door = self.door
        options = door.options
        fast_route = (
            route(head, door.directory.table, options.domain) if head.plain and options.fast_path else None
        )
        if fast_route is None:
            self._hand_off(head, head_end)
            return
        service = fast_route[0]
        forward_authorization = False
        authorization = head.authorization
        if service.settings.auth or authorization is not None:
            raw = None if authorization is None else authorization.decode("latin-1")
            token = bearer_token(raw) if service.settings.auth else carried_token(raw)
            known, user = door.tokens.cached_user(token)
            if not known:
                if token != self._looked_up:
                    self._looked_up = token
                    self._token_lookup = asyncio.get_running_loop().create_task(self._look_up(token))
                else:
                    self._hand_off(head, head_end)  # the lookup failed: the app asks again, and answers
                return
            if service.settings.auth:
                if user is None or not user.sees(service.project):
                    self._hand_off(head, head_end)  # the app answers 401 or 403 (503: the store cannot say)
                    return
            else:
                forward_authorization = user is None  # gateway.rules.forwards_authorization
        if service.settings.rate_limits and _over_rate_limit(door, head, head_bytes, service, self.address):
            # The app answers it 429: it decides again, and a refusal takes no token (gateway.rate_limits).
            self._hand_off(head, head_end)
            return
        replica = door.balancer.pick(service)
        if replica is None:
            self._hand_off(head, head_end)
            return
        door.balancer.acquire(replica.id)
        door.stats.count(service.run_id)
        close = bool(head.connection) and b"close" in head.connection_tokens()
        exchange = Exchange(
            self, head, fast_route, replica, close_client=close, forward_authorization=forward_authorization
        )
        self.exchange = exchange
        self.idle_since = 0.0
        self._buffer = b""
        if head_end < len(buffer):
            self._buffer = exchange.client_data(buffer[head_end:])
        exchange.start()

    def _head_coming(self, buffer: bytes) -> None:
        """A head begun in `buffer` but not whole: checked as far as it came, and timed."""
        scan = self._scan
        if scan is None:
            scan = self._scan = HeadScan()
            loop = asyncio.get_running_loop()
            self.head_since = loop.time()
            timeout = self.door.options.head_timeout
            self._head_timer = loop.call_later(timeout, self.refuse, slow_head_refusal(timeout))
            self.door.head_started(self)
        refusal = scan.refusal(buffer)
        if refusal is not None:
            self.refuse(refusal)

    def _head_over(self) -> None:
        self._scan = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self.door.head_ended(self)

    def refuse(self, refusal: ProxyRefusal) -> None:
        """Answers the request whose head is in the buffer with the proxy's refusal, then closes: at once
        when the client has sent all it had, else after LINGER seconds of reading what still comes."""
        if self._scan is not None:
            self._head_over()
        if self.closed or self._refused or self.transport is None:
            return
        log.info("refused a request from %s: %d %s", self.address.decode(), refusal.status, refusal.message)
        self._refused = True
        self._buffer = b""
        transport = self.transport
        transport.write(refusal_bytes(refusal))
        if self.paused:
            self.set_paused(self.paused, False)
        if transport.can_write_eof():
            transport.write_eof()  # the client reads the answer, then the end, and closes its side
            asyncio.get_running_loop().call_later(LINGER, self.close)
        else:
            self.close()

    async def _look_up(self, token: str | None) -> None:
        try:
            await self.door.tokens.user(token)
        except Exception:
            pass  # not cached: the app looks it up again, and answers 503 if it fails again
        finally:
            self._token_lookup = None
        if not self.closed and self.exchange is None:
            self._serve_next()

    def _hand_off(self, head: RequestHead, head_end: int) -> None:
        """Gives the connection, with the request whose head ends at `head_end` in the buffer, to the
        aiohttp app for good (gateway.fast_path.app_connection: that request and nothing after)."""
        transport = self.transport
        if transport is None or self.closed:
            return
        self.door.closed(self)
        self.closed = True  # for this protocol: nothing of it acts on the transport any more
        if self.paused:
            transport.resume_reading()
        handler = AppConnection(self._fallback(), body_framing(head))
        transport.set_protocol(handler)
        handler.connection_made(transport)
        received, self._buffer = self._buffer, b""
        handler.head_received(received[:head_end])
        if head_end < len(received):
            handler.data_received(received[head_end:])


def _over_rate_limit(
    door: Door, head: RequestHead, head_bytes: bytes, service: Service, address: bytes
) -> bool:
    """Whether the request (`head`, read from `head_bytes`) is over one of the service's rate limits; if
    not, it has taken its token. Its path within the service, and a header's first value (any header: the
    head's bytes, as the app reads them, gateway.forwarding)."""
    path = request_path(head.target[len(service.path) - 1 :])  # routed: the target starts with the path

    def header(name: str) -> bytes | None:
        line = re.search(b"\r\n" + re.escape(name.encode()) + b":([^\r]*)\r\n", head_bytes, re.IGNORECASE)
        return None if line is None else line[1].strip(b" \t")

    return (
        door.rate_limiter.refusal(service.run_id, service.settings.rate_limits, path, address, header)
        is not None
    )
