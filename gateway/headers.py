"""Which headers cross the proxy, each way.

Hop-by-hop headers (RFC 9110 7.6.1: Connection, Keep-Alive, Transfer-Encoding, Upgrade, ... and whatever
Connection names) describe one connection and are dropped; the client library and the server frame each
side themselves. The replica sees its own host as Host; the client's Host, address and scheme travel as
X-Forwarded-Host/-For/-Proto (an incoming X-Forwarded-For is extended, as a chain of proxies does), and,
when the service path was stripped, X-Forwarded-Prefix says what was taken off (for replicas that build
links). A Ferry token is the proxy's business: no replica gets an Authorization header that carries one, and
a service with `auth` gets none at all (gateway.rules.forwards_authorization).
"""

from __future__ import annotations

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.rules import origin_form

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Set by the proxy itself (or by the client library for the replica).
_NOT_FORWARDED = HOP_BY_HOP | {"host", "expect", "x-forwarded-for"}
_WEBSOCKET_HANDSHAKE = frozenset(
    {"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol"}
)


def _dropped(headers: CIMultiDictProxy[str], always: frozenset[str]) -> frozenset[str]:
    named = headers.get("Connection")
    if not named:
        return always
    return always | {token.strip().lower() for token in named.split(",")}


def upstream_headers(
    request: web.BaseRequest,
    *,
    drop_authorization: bool,
    stripped_prefix: str | None,
    websocket: bool = False,
) -> CIMultiDict[str]:
    """The headers the replica gets for this request."""
    incoming = request.headers
    dropped = _dropped(incoming, (_NOT_FORWARDED | _WEBSOCKET_HANDSHAKE) if websocket else _NOT_FORWARDED)
    headers: CIMultiDict[str] = CIMultiDict()
    for name, value in incoming.items():
        if name.lower() not in dropped:
            headers.add(name, value)
    if drop_authorization:
        headers.popall("Authorization", None)
    remote = request.remote or ""
    forwarded_for = incoming.get("X-Forwarded-For")
    headers["X-Forwarded-For"] = f"{forwarded_for}, {remote}" if forwarded_for else remote
    if "X-Forwarded-Host" not in headers:
        # The host the client asked for, port included: an absolute-form target's authority stands in
        # for Host (RFC 9112 3.2.2).
        host = origin_form(request.raw_path)[1] or incoming.get("Host")
        if host:
            headers["X-Forwarded-Host"] = host
    if "X-Forwarded-Proto" not in headers:
        headers["X-Forwarded-Proto"] = request.scheme
    if stripped_prefix is not None:
        headers["X-Forwarded-Prefix"] = stripped_prefix
    return headers


def downstream_headers(upstream: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """The headers the client gets of the replica's response (Content-Length kept when there is one)."""
    dropped = _dropped(upstream, HOP_BY_HOP)
    headers: CIMultiDict[str] = CIMultiDict()
    for name, value in upstream.items():
        if name.lower() not in dropped:
            headers.add(name, value)
    return headers


def is_websocket_upgrade(request: web.BaseRequest) -> bool:
    return request.method == "GET" and request.headers.get("Upgrade", "").lower() == "websocket"
