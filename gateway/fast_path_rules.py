"""What the fast path does with a request and its answer: pure decisions on parsed heads (gateway.http1).

- `route`: whether a request is the fast path's (a plain request for a service with a ready replica, see
  gateway.fast_path) and, if so, which service and which target the replica gets; None sends the request
  to the aiohttp app. The rules are the services API's (gateway.services_api): strip_prefix as there.
- `upstream_head` / `downstream_head`: the heads as they cross, with the headers gateway.headers says
  (hop-by-hop ones dropped; Host, X-Forwarded-*; the Ferry token kept from a service with `auth`).
- `answer_framing`: how a replica's answer is delimited, and whether its connection may be used again.
- `may_resend`: whether a request whose replica failed before answering may go to a replica once more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from core.services.replicas import SERVICES_PREFIX
from gateway.headers import HOP_BY_HOP
from gateway.http1 import RequestHead, ResponseHead
from gateway.routing_table import RoutingTable, Service

# `<prefix>/<project>/<run>/`, with names the fast path routes as they are (aiohttp's router would
# percent-decode others, and normalise dot segments).
_NAME = r"([A-Za-z0-9_~-][A-Za-z0-9_.~-]*)"
_SERVICE_TARGET = re.compile(re.escape(SERVICES_PREFIX) + "/" + _NAME + "/" + _NAME + "/")
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
# Headers that send a request to the aiohttp app: a protocol switch, or an interim answer to wait for.
_NOT_PLAIN = frozenset({b"upgrade", b"expect"})

_ALWAYS_DROPPED_UP = frozenset(
    name.encode() for name in HOP_BY_HOP | {"host", "expect", "x-forwarded-for", "content-length"}
)
_ALWAYS_DROPPED_DOWN = frozenset(name.encode() for name in HOP_BY_HOP)
_NO_BODY_STATUSES = frozenset({204, 304})


@dataclass(frozen=True, slots=True)
class FastRoute:
    service: Service
    target: str  # what the replica gets: path and query, still percent-encoded
    stripped_prefix: str | None  # X-Forwarded-Prefix, when the service path was taken off


def route(head: RequestHead, table: RoutingTable) -> FastRoute | None:
    """The fast path's route for this request, or None: the aiohttp app answers it (other paths, the
    slash redirect, an unknown service, one with no ready replica to hold for, an upgrade, ...)."""
    target = head.target
    matched = _SERVICE_TARGET.match(target)
    if matched is None or head.method == "CONNECT":
        return None
    names = head.headers.names
    if not _NOT_PLAIN.isdisjoint(names) or b"host" not in names:
        return None
    service = table.services.get((matched.group(1), matched.group(2)))
    if service is None or not service.ready:
        return None
    if service.settings.strip_prefix:
        return FastRoute(service, target[matched.end() - 1 :], service.path.rstrip("/"))
    return FastRoute(service, target, None)


def upstream_head(head: RequestHead, fast_route: FastRoute, replica_url: str, client_address: str) -> bytes:
    """The head the replica gets: `head` to `fast_route.target` on the replica at `replica_url`."""
    headers = head.headers
    dropped = _ALWAYS_DROPPED_UP | headers.connection_tokens()
    if fast_route.service.settings.auth:
        dropped |= {b"authorization"}
    if fast_route.stripped_prefix is not None:
        dropped |= {b"x-forwarded-prefix"}
    host = replica_url.partition("://")[2]
    parts = [f"{head.method} {fast_route.target} HTTP/1.1\r\nHost: {host}\r\n".encode()]
    names = headers.names
    parts += [line for name, line in zip(names, headers.lines, strict=True) if name not in dropped]
    forwarded_for = headers.get(b"x-forwarded-for")
    chain = forwarded_for.decode("latin-1") + ", " + client_address if forwarded_for else client_address
    extra = [f"X-Forwarded-For: {chain}\r\n"]
    if b"x-forwarded-host" not in names:
        extra.append(f"X-Forwarded-Host: {(headers.get(b'host') or b'').decode('latin-1')}\r\n")
    if b"x-forwarded-proto" not in names:
        extra.append("X-Forwarded-Proto: http\r\n")
    if fast_route.stripped_prefix is not None:
        extra.append(f"X-Forwarded-Prefix: {fast_route.stripped_prefix}\r\n")
    if head.chunked:
        extra.append("Transfer-Encoding: chunked\r\n")
    elif head.length or b"content-length" in names:
        extra.append(f"Content-Length: {head.length}\r\n")
    parts.append("".join(extra).encode("latin-1") + b"\r\n")
    return b"".join(parts)


class Framing(Enum):
    NONE = "none"  # no body (HEAD, 204, 304)
    LENGTH = "length"  # Content-Length
    CHUNKED = "chunked"  # passed through chunk by chunk as it is
    UNTIL_CLOSE = "until-close"  # the replica closes at its end; the client gets it chunked


@dataclass(frozen=True, slots=True)
class AnswerFraming:
    framing: Framing
    length: int  # with LENGTH
    reusable: bool  # whether the replica's connection may carry another request after this answer


def answer_framing(head: ResponseHead, method: str) -> AnswerFraming | None:
    """How the answer's body is delimited; None if its head says so in a way the proxy cannot follow."""
    headers = head.headers
    keep_alive = not head.http10 and b"close" not in headers.connection_tokens()
    if method == "HEAD" or head.status in _NO_BODY_STATUSES:
        return AnswerFraming(Framing.NONE, 0, keep_alive)
    transfer = headers.get(b"transfer-encoding")
    if transfer is not None:
        if transfer.lower() != b"chunked" or headers.count(b"transfer-encoding") > 1:
            return None
        return AnswerFraming(Framing.CHUNKED, 0, keep_alive)
    lengths = headers.count(b"content-length")
    if lengths:
        value = headers.get(b"content-length") or b""
        if lengths > 1:  # the same value each time, or none that can be trusted
            values = {
                line.partition(b":")[2].strip()
                for line in headers.lines
                if line[:15].lower() == b"content-length:"
            }
            value = value if values == {value} else b""
        if not value.isdigit() or len(value) > 18:
            return None
        return AnswerFraming(Framing.LENGTH, int(value), keep_alive)
    return AnswerFraming(Framing.UNTIL_CLOSE, 0, False)


def downstream_head(head: ResponseHead, framing: AnswerFraming, close: bool) -> bytes:
    """The head the client gets: the replica's status and end-to-end headers, framed for this hop."""
    headers = head.headers
    dropped = _ALWAYS_DROPPED_DOWN | headers.connection_tokens()
    if framing.framing in (Framing.CHUNKED, Framing.UNTIL_CLOSE):
        dropped |= {b"content-length"}
    parts = [b"HTTP/1.1 " + head.status_line[9:]]
    parts += [line for name, line in zip(headers.names, headers.lines, strict=True) if name not in dropped]
    if framing.framing in (Framing.CHUNKED, Framing.UNTIL_CLOSE):
        parts.append(b"Transfer-Encoding: chunked\r\n")
    if close:
        parts.append(b"Connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


def plain_reply(status: int, reason: str, message: str, close: bool) -> bytes:
    """The proxy's own answer in plain text (as gateway.replies.plain_error words it), head and body."""
    body = (message + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n{'Connection: close' + chr(13) + chr(10) if close else ''}\r\n"
    )
    return head.encode() + body


def may_resend(method: str, has_body: bool, body_kept: bool, reached: bool) -> bool:
    """Whether a request whose replica failed before any answer may be sent once more: one the replica
    never got (a refused connection), or one it may have got that is idempotent or bodiless, provided the
    body sent so far was kept."""
    if not reached:
        return True
    return body_kept and (method in IDEMPOTENT or not has_body)


def failed_message(service: Service, replica_url: str, reason: str, when: str) -> str:
    """The 502's words, as gateway.forwarding says them."""
    return f"replica {replica_url} of {service.project}/{service.run_name} failed {when}: {reason}"
