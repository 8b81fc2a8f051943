"""A client connection handed from the fast path to the aiohttp app, for one request.

The app's own protocol (aiohttp's RequestHandler) gets the request's head and its body, as its framing
delimits it (gateway.fast_path.http1), and nothing after: the app's answer closes the connection
(gateway.app), so a next request, pipelined or not, would only be parsed by aiohttp to be dropped, and a
malformed one would be answered by aiohttp in its own words (which echo the head) instead of the front
door's. A malformed chunked body is answered here as on the fast path (400, or the answer cut if the app has
begun it): aiohttp, fed it mid-request, would fail inside its data_received. An upgraded connection (a
WebSocket) passes everything, both ways, for as long as it lasts.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from gateway.fast_path.heads import RequestHead
from gateway.fast_path.http1 import BodyFraming, ChunkedBody, LengthBody, MalformedBody
from gateway.rules import MALFORMED_CHUNKED, refusal_bytes

log = logging.getLogger(__name__)


def body_framing(head: RequestHead) -> BodyFraming | None:
    """How the request's body ends; None: it does not (an upgrade: all that follows is the app's)."""
    if head.upgrade:
        return None
    if head.chunked:
        return ChunkedBody()
    return LengthBody(head.length)


class AppConnection(asyncio.Protocol):
    """The transport's protocol once the app has the connection: aiohttp's, fed one request."""

    def __init__(self, handler: asyncio.Protocol, body: BodyFraming | None) -> None:
        self._handler = handler
        self._body = body
        self._transport: WatchedTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = WatchedTransport(transport)
        self._handler.connection_made(cast(asyncio.BaseTransport, self._transport))

    def head_received(self, head: bytes) -> None:
        """The request's head, as the fast path read it: the app's, whole."""
        self._handler.data_received(head)

    def data_received(self, data: bytes) -> None:
        body = self._body
        if body is None:
            self._handler.data_received(data)
            return
        if body.done:
            return  # past the request: dropped, the connection closes after the answer
        try:
            taken = body.feed(data)
        except MalformedBody as err:
            log.info("a client's chunked body is malformed: %s", err)
            self._refuse_body()
            return
        if taken:
            self._handler.data_received(data if taken == len(data) else data[:taken])

    def _refuse_body(self) -> None:
        transport = self._transport
        assert transport is not None
        if transport.written:
            transport.abort()  # an answer begun: cut, so that it does not look whole
            return
        transport.write(refusal_bytes(MALFORMED_CHUNKED))
        transport.close()  # the app's handler is cancelled as its connection goes

    def eof_received(self) -> bool | None:
        return self._handler.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()


class WatchedTransport:
    """The app's view of the transport: the transport itself, but for knowing whether it has written."""

    def __init__(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self.written = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written = True
        self._transport.write(data)  # type: ignore[attr-defined]

    def writelines(self, lines: Any) -> None:
        self.written = True
        self._transport.writelines(lines)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
