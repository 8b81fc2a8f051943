"""What the fast path does with a request and its answer: pure decisions on parsed heads
(gateway.fast_path.heads).

- `route`: whether a request is the fast path's (a plain request for a service with a ready replica,
  see gateway.fast_path.connection) and, if so, which service and which target the replica gets; None
  sends the request to the aiohttp app. The rules are the services API's (gateway.services_api):
  strip_prefix as there.
- `upstream_head` / `downstream_head`: the heads as they cross, with the headers gateway.headers says
  (hop-by-hop ones dropped; Host, X-Forwarded-*; no Ferry token, gateway.rules.forwards_authorization).

The rules both paths share (resends, small answers, the 502's and refusals' words) are gateway.rules'.
"""

from __future__ import annotations

import re

from core.services.domains import route_host
from core.services.replicas import SERVICES_PREFIX
from gateway.fast_path.heads import AnswerHead, Framing, RequestHead
from gateway.headers import HOP_BY_HOP
from gateway.routing_table import RoutingTable, Service

# `<prefix>/<project>/<run>/`, with names the fast path routes as they are (aiohttp's router would
# percent-decode others, and normalise dot segments).
_NAME = rb"([A-Za-z0-9_~-][A-Za-z0-9_.~-]*)"
_SERVICE_TARGET = re.compile(re.escape(SERVICES_PREFIX.encode()) + b"/" + _NAME + b"/" + _NAME + b"/")

_DROPPED_DOWN = frozenset(name.encode() for name in HOP_BY_HOP)
_RECHUNKED = (Framing.CHUNKED, Framing.UNTIL_CLOSE)  # answers the client gets with chunked coding


# A route: the service, what its replica gets as the request target (path and query, still
# percent-encoded), and the prefix taken off it (X-Forwarded-Prefix), None if none was. A plain tuple:
# one is made for every request.
FastRoute = tuple[Service, bytes, bytes | None]


def route(head: RequestHead, table: RoutingTable, domain: str | None = None) -> FastRoute | None:
    """The fast path's route for this request, or None: the aiohttp app answers it (other paths, the
    slash redirect, an unknown service, one with no ready replica to hold for, a Host under the proxy's
    `domain`: routed by its host, gateway.host_routing)."""
    if (
        domain is not None
        and head.host is not None
        and route_host(head.host.decode("latin-1"), domain) is not None
    ):
        return None
    target = head.target
    matched = _SERVICE_TARGET.match(target)
    if matched is None:
        return None
    service = table.services.get((matched[1].decode(), matched[2].decode()))
    if service is None or not service.ready:
        return None
    if service.settings.strip_prefix:
        end = matched.end() - 1  # the service path without its trailing slash: the prefix taken off
        return service, target[end:], target[:end]
    return service, target, None


def upstream_head(
    head: RequestHead,
    fast_route: FastRoute,
    replica_host: bytes,
    client_address: bytes,
    forward_authorization: bool = False,
    scheme: bytes = b"http",
) -> bytes:
    """The head the replica gets: `head` to `fast_route`'s target on the replica at `replica_host`
    (host:port), from the client at `client_address`; with its Authorization header if
    `forward_authorization` (gateway.rules.forwards_authorization); X-Forwarded-Proto `scheme` unless the
    client sent one."""
    _, target, stripped = fast_route
    forwarded = b"".join(head.parts)
    if forward_authorization and head.authorization is not None:
        forwarded += head.authorization_name + b": " + head.authorization + b"\r\n"
    prefix = head.prefix_lines if stripped is None else b"X-Forwarded-Prefix: " + stripped + b"\r\n"
    chain = client_address if head.forwarded_for is None else head.forwarded_for + b", " + client_address
    host = b"" if head.has_forwarded_host else b"X-Forwarded-Host: " + (head.host or b"") + b"\r\n"
    proto = b"" if head.has_forwarded_proto else b"X-Forwarded-Proto: " + scheme + b"\r\n"
    if head.chunked:
        framing = b"Transfer-Encoding: chunked\r\n"
    elif head.has_length:
        framing = b"Content-Length: %d\r\n" % head.length
    else:
        framing = b""
    return b"%s %s HTTP/1.1\r\nHost: %s\r\n%sX-Forwarded-For: %s\r\n%s%s%s%s\r\n" % (
        head.method,
        target,
        replica_host,
        forwarded,
        chain,
        host,
        proto,
        prefix,
        framing,
    )


def downstream_head(answer: AnswerHead, close: bool) -> bytes:
    """The head the client gets: the replica's status and end-to-end headers, framed for this hop; most
    often the head as it came (`answer.verbatim`)."""
    if answer.verbatim:
        return answer.raw[:-2] + b"Connection: close\r\n\r\n" if close else answer.raw
    dropped = _DROPPED_DOWN | answer.connection_tokens()
    rechunked = answer.framing in _RECHUNKED
    if rechunked:
        dropped |= {b"content-length"}
    lines = answer.raw.split(b"\r\n")  # the status line, the header lines, then the two empty ones
    parts = [b"HTTP/1.1 " + lines[0][9:] + b"\r\n"]
    parts += [line + b"\r\n" for line in lines[1:-2] if line.partition(b":")[0].lower() not in dropped]
    if rechunked:
        parts.append(b"Transfer-Encoding: chunked\r\n")
    if close:
        parts.append(b"Connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)
