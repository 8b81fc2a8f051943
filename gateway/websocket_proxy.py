"""WebSockets through the proxy: the client's handshake is answered only once the replica's succeeded.

The proxy connects to the replica first (offering the client's subprotocols), then accepts the client
with the subprotocol the replica chose, and pumps messages both ways (text, binary, close) until either
side closes; the other side is then closed with the same code. Pings are answered on each hop. A replica
that refuses the handshake gives the client a 502 (or the replica's own 4xx/5xx status) before any
upgrade. The in-flight count of the replica covers the connection's whole life, so a draining replica is
marked drained only once its sockets through this proxy are closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
from aiohttp import WSMsgType, web
from multidict import CIMultiDict
from yarl import URL

from gateway.replies import plain_error

log = logging.getLogger(__name__)

WebSocket = web.WebSocketResponse | aiohttp.ClientWebSocketResponse
# Codes a close frame may carry (RFC 6455 7.4): 1005 and 1006 only ever describe a missing one.
_UNSENDABLE = frozenset({1005, 1006, 1015})
_CLOSE_TIMEOUT = 5.0  # for the other side's close frame


async def proxy_websocket(
    request: web.Request, session: aiohttp.ClientSession, url: URL, headers: CIMultiDict[str]
) -> web.StreamResponse:
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    try:
        upstream = await session.ws_connect(
            url, headers=headers, protocols=offered, autoping=True, max_msg_size=0, compress=0
        )
    except aiohttp.WSServerHandshakeError as err:
        status = err.status if err.status >= 400 else 502
        return plain_error(status, f"the replica refused the WebSocket handshake: {err.status} {err.message}")
    except (aiohttp.ClientError, OSError, TimeoutError) as err:
        return plain_error(502, f"could not open a WebSocket to the replica {url.origin()}: {err}")
    try:
        downstream = web.WebSocketResponse(
            protocols=(upstream.protocol,) if upstream.protocol else (),
            autoping=True,
            max_msg_size=0,
            compress=False,
        )
        await downstream.prepare(request)
        await _pump_both_ways(downstream, upstream)
        return downstream
    finally:
        await upstream.close()


async def _pump_both_ways(
    downstream: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse
) -> None:
    to_replica = asyncio.create_task(_pump(downstream, upstream))
    to_client = asyncio.create_task(_pump(upstream, downstream))
    tasks = (to_replica, to_client)
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        # The side that closed first gives its code to the other; closing that one ends its pump too.
        closed_first, other = (downstream, upstream) if to_replica in done else (upstream, downstream)
        code = closed_first.close_code
        if code is None or code in _UNSENDABLE:
            code = aiohttp.WSCloseCode.OK if code in (None, 1005) else aiohttp.WSCloseCode.INTERNAL_ERROR
        with contextlib.suppress(Exception):
            await asyncio.wait_for(other.close(code=code), _CLOSE_TIMEOUT)
        await asyncio.wait(tasks, timeout=_CLOSE_TIMEOUT)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _pump(source: WebSocket, sink: WebSocket) -> None:
    """Sends on each message from `source` until it closes (or the sink cannot take more)."""
    while True:
        message = await source.receive()
        kind = message.type
        if kind == WSMsgType.TEXT:
            await sink.send_str(message.data)
        elif kind == WSMsgType.BINARY:
            await sink.send_bytes(message.data)
        elif kind in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
            return
