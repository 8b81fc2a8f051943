"""The proxy's rules, one set for both of its paths (the fast path, gateway.fast_path.connection, and the
aiohttp app, gateway.forwarding): what a request head may be, which requests may be sent twice, which answers
are read whole, what a Ferry token may reach, and the words of the proxy's own answers. docs/services.md
("Requests the proxy refuses") states them and says where they differ from nginx's.
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.routing_table import Service

# --- request heads (checked by gateway.fast_path.head_checks before either path sees them) ------------------

MAX_HEAD = 64 * 1024  # bytes of a request head, its request line and blank line included
MAX_LINE = 8190  # bytes of its request line, or of one header line (aiohttp's and nginx's 8 KiB buffer)
MAX_HEADERS = 100  # header lines in a head (Apache's LimitRequestFields)
HEAD_TIMEOUT = 20.0  # seconds from a head's first byte to its blank line (Apache's mod_reqtimeout)
MAX_SLOW_HEADS = 256  # connections whose head is still coming; past it the longest waiting is refused


class ProxyRefusal(NamedTuple):
    """The proxy's answer to a request it will not serve: its status, the status's phrase, and one line
    that names the problem without echoing anything the client sent."""

    status: int
    phrase: str
    message: str


def bad_request(problem: str) -> ProxyRefusal:
    return ProxyRefusal(400, "Bad Request", f"malformed request: {problem}")


HEAD_TOO_LARGE = ProxyRefusal(
    431, "Request Header Fields Too Large", f"the request head is larger than {MAX_HEAD} bytes"
)
TOO_MANY_HEADERS = ProxyRefusal(
    431, "Request Header Fields Too Large", f"the request has more than {MAX_HEADERS} header lines"
)
HEADER_LINE_TOO_LONG = ProxyRefusal(
    431, "Request Header Fields Too Large", f"a header line is longer than {MAX_LINE} bytes"
)
REQUEST_LINE_TOO_LONG = ProxyRefusal(414, "URI Too Long", f"the request line is longer than {MAX_LINE} bytes")
BARE_LF = bad_request("a line of the head ends in a bare LF (HTTP/1.1 heads end their lines with CRLF)")
BARE_CR = bad_request("the head has a CR that does not end a line")
NOT_HTTP1 = bad_request("the request line is not `METHOD TARGET HTTP/1.1` (or HTTP/1.0)")
NOT_A_TARGET = bad_request("the request target is neither a path nor an http(s) URL")
VERSION = ProxyRefusal(505, "HTTP Version Not Supported", "the proxy speaks HTTP/1.1 and HTTP/1.0")
NO_HOST = bad_request("an HTTP/1.1 request needs one Host header")
TWO_HOSTS = bad_request("the request has more than one Host header")
TWO_AUTHORIZATIONS = bad_request("the request has more than one Authorization header")
TOO_MANY_SLOW_HEADS = ProxyRefusal(
    408, "Request Timeout", "the request head was too slow in coming while many others were"
)
MALFORMED_CHUNKED = bad_request("the chunked body does not follow chunked coding")


def slow_head_refusal(timeout: float) -> ProxyRefusal:
    """A head that did not come whole within the proxy's head timeout, `timeout` seconds."""
    return ProxyRefusal(408, "Request Timeout", f"the request head did not come within {timeout:g} s")


def refusal_bytes(refusal: ProxyRefusal) -> bytes:
    """The refusal as a whole answer in plain text; the connection closes after it."""
    return plain_reply(refusal.status, refusal.phrase, refusal.message, close=True)


def plain_reply(status: int, phrase: str, message: str, close: bool) -> bytes:
    """The proxy's own answer in plain text, head and body (gateway.replies.plain_error's words)."""
    body = (message + "\n").encode()
    head = f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
    head += f"Content-Length: {len(body)}\r\n"
    if status == 401:
        head += "WWW-Authenticate: Bearer\r\n"
    return head.encode() + (b"Connection: close\r\n\r\n" if close else b"\r\n") + body


# --- targets -----------------------------------------------------------------------------------------


def origin_form(target: str) -> tuple[str, str | None]:
    """A request target as its path and query (still percent-encoded), and the authority an absolute-form
    target names (RFC 9112 3.2.2: it stands in for Host), None for an origin-form one."""
    if target.startswith("/"):
        return target, None
    scheme, separator, rest = target.partition("://")
    if not separator or "/" in scheme:
        return target, None
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    path = rest[cut:]
    return (path if path.startswith("/") else "/" + path), rest[:cut]


# --- forwarding --------------------------------------------------------------------------------------

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
SMALL_ANSWER = 64 * 1024  # bytes: an answer with a Content-Length up to this is read whole, then sent


def may_resend(method: str, has_body: bool, body_kept: bool, reached: bool) -> bool:
    """Whether a request whose replica failed before any answer may be sent once more: one the replica
    never got (a refused connection), or one it may have got that is idempotent or bodiless, provided the
    body sent so far was kept."""
    if not reached:
        return True
    return body_kept and (method in IDEMPOTENT or not has_body)


def failed_message(service: Service, replica_url: str, err: BaseException, when: str) -> str:
    """The 502's words: which replica failed, when, and why (the error's first line)."""
    reason = (str(err) or type(err).__name__).splitlines()[0]
    return f"replica {replica_url} of {service.project}/{service.run_name} failed {when}: {reason}"


def forwards_authorization(service_auth: bool, ferry_token: bool | None) -> bool:
    """Whether the replica gets the request's Authorization header: never from a service with `auth` (the
    proxy checked it), and from any other only when it carries no Ferry token (`ferry_token`: whether it
    does; None: the store could not say, so it is not forwarded either)."""
    return not service_auth and ferry_token is False


# --- the proxy's own answers -------------------------------------------------------------------------

TOKEN_HOW = "send `Authorization: Bearer <token>` (`ferry token` shows yours)"


def not_a_member(user: str, project: str, run_name: str) -> str:
    return f"{project}/{run_name} admits its project's members only: {user} is not a member of {project}"


def token_needed(project: str, run_name: str) -> str:
    return f"{project}/{run_name} needs a Ferry token: {TOKEN_HOW}"


TOKEN_NOT_VALID = f"the token is not a valid Ferry token: {TOKEN_HOW}"
