"""HTTP/1.1 message heads as the proxy reads them, with httptools.

httptools is llhttp (Node's HTTP parser, in C; uvicorn's too). It checks each head strictly: no obs-fold,
bare CR or LF, space before a colon, duplicate Content-Length, Content-Length beside Transfer-Encoding...
A request's headers come from it one by one (`on_header`), since the proxy rebuilds the head it forwards.
An answer's head is most often forwarded as it came, so llhttp calls nothing back for it, and one regular
expression picks out the few headers the proxy acts on: a Python call per header would cost more. Only
heads are fed to llhttp, a fresh parser for each (0.15 µs): bodies are followed by gateway.fast_path.http1's
framing, which passes their bytes through as they come (llhttp would copy them, undo chunked coding, and
cannot be told that the answer to a HEAD has no body).

Every request head is read here, whichever path serves it (gateway.fast_path.connection reads it first): one
llhttp refuses, or that has two Host or Authorization headers or an HTTP/1.1 one without Host, is answered 400
with llhttp's own words for it (they name the problem, never a value). A head is the fast path's
(`plain`) if it says HTTP/1.1, its body is delimited by one Content-Length or by chunked coding alone, and
it neither switches protocols nor expects an interim answer; others go to the aiohttp app. An answer head
llhttp refuses is the replica's failure (502).
"""

from __future__ import annotations

import re
from enum import Enum

from httptools import HttpParserError, HttpParserUpgrade, HttpRequestParser, HttpResponseParser

from gateway.headers import HOP_BY_HOP
from gateway.rules import NO_HOST, TWO_AUTHORIZATIONS, TWO_HOSTS, ProxyRefusal, bad_request

_PARSE_ERRORS = (HttpParserError, HttpParserUpgrade)


class _Unheard:
    """A parser's protocol with no callbacks: llhttp checks the head and calls nothing."""

    __slots__ = ()


_UNHEARD = _Unheard()


# A request's headers that the proxy decides on (the others are forwarded as they came).
_DECIDED_UP = frozenset(
    name.encode()
    for name in HOP_BY_HOP
    | {"host", "content-length", "expect", "authorization"}
    | {"x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-prefix"}
)
# An answer's header lines that the proxy decides on (hop-by-hop ones, and its body's length): group 1
# the name, group 2 the value, trimmed. Sound once llhttp has taken the head: each line is `name:value`.
_DECIDED_DOWN = re.compile(
    rb"\r\n("
    + b"|".join(re.escape(name.encode()) for name in sorted(HOP_BY_HOP | {"content-length"}))
    + rb"):[ \t]*([^\r]*?)[ \t]*(?=\r\n)",
    re.IGNORECASE,
)
_NO_BODY_STATUSES = frozenset({204, 304})


def _tokens(values: bytes) -> frozenset[bytes]:
    """The lowercase tokens of comma-separated header values (each ending with a comma)."""
    return frozenset(token.strip() for token in values.split(b",")) - {b""}


class RequestHead:
    """A request head, its headers from httptools' callback (parse_request_head): what the proxy
    decides on, and the other headers as they came.

    Its attributes have class-level defaults, so that a plain head sets only what it has."""

    host: bytes | None = None
    authorization: bytes | None = None  # the Authorization header's value (one at most)
    authorization_name = b"Authorization"  # as the client spelt it
    prefix_lines = b""  # X-Forwarded-Prefix: forwarded unless the proxy sets its own
    forwarded_for: bytes | None = None  # X-Forwarded-For's values, comma-joined
    has_forwarded_host = False  # X-Forwarded-Host and -Proto are forwarded as they came
    has_forwarded_proto = False
    connection = b""  # the Connection headers' values, lowercase, each followed by a comma
    length = 0  # the body's Content-Length; 0 without a body or with chunked coding
    has_length = False
    chunked = False
    plain = True  # False: something sends the request to the aiohttp app
    upgrade = False  # it asks to switch protocols (a WebSocket): not plain
    refusal: ProxyRefusal | None = None  # why the proxy answers it 400 itself

    def __init__(self, method: bytes, target: bytes) -> None:
        self.method = method
        self.target = target  # the raw request target, still percent-encoded
        self.parts: list[bytes] = []  # the headers to forward: name, b": ", value, b"\r\n", name, ...

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        if lower not in _DECIDED_UP:
            self.parts.extend((name, b": ", value, b"\r\n"))
        elif lower == b"host":  # the one nearly every request has: first
            if self.host is not None:
                self.refusal = TWO_HOSTS
            self.host = value.strip()
        else:
            self._decide(lower, name, value)

    def _decide(self, lower: bytes, name: bytes, value: bytes) -> None:
        value = value.strip()
        if lower == b"content-length":  # llhttp has checked its digits, and that it is the only one
            self.length, self.has_length = int(value), True
            self.plain = self.plain and len(value) <= 18
        elif lower == b"transfer-encoding":
            self.plain = self.plain and not self.chunked and value.lower() == b"chunked"
            self.chunked = True
        elif lower == b"connection":
            self.connection += value.lower() + b","
        elif lower == b"authorization":
            if self.authorization is not None:
                self.refusal = TWO_AUTHORIZATIONS
            self.authorization, self.authorization_name = value, name
        elif lower == b"x-forwarded-for":
            self.forwarded_for = value if self.forwarded_for is None else self.forwarded_for + b", " + value
        elif lower == b"x-forwarded-prefix":
            self.prefix_lines += name + b": " + value + b"\r\n"
        elif lower == b"x-forwarded-host" or lower == b"x-forwarded-proto":
            self.parts.extend((name, b": ", value, b"\r\n"))
            if lower == b"x-forwarded-host":
                self.has_forwarded_host = True
            else:
                self.has_forwarded_proto = True
        elif lower == b"upgrade" or lower == b"expect":
            self.plain = False  # a protocol switch, or an interim answer to wait for: the app's
            self.upgrade = self.upgrade or lower == b"upgrade"
        # Any other is hop-by-hop: dropped.

    def connection_tokens(self) -> frozenset[bytes]:
        """The lowercase tokens of its Connection headers (`close`, `keep-alive`, header names, ...)."""
        return _tokens(self.connection) if self.connection else frozenset()

    def drop_named(self, names: frozenset[bytes]) -> None:
        """Drops the headers its Connection header names (lowercase `names`): hop-by-hop too."""
        parts = self.parts
        self.parts = []
        for start in range(0, len(parts), 4):
            if parts[start].lower() not in names:
                self.parts += parts[start : start + 4]
        if b"authorization" in names:
            self.authorization = None
        if b"x-forwarded-prefix" in names:
            self.prefix_lines = b""
        if b"x-forwarded-for" in names:
            self.forwarded_for = None
        self.has_forwarded_host = self.has_forwarded_host and b"x-forwarded-host" not in names
        self.has_forwarded_proto = self.has_forwarded_proto and b"x-forwarded-proto" not in names


def parse_request_head(head: bytes) -> RequestHead | ProxyRefusal:
    """The head (up to and including its blank line, its request line `METHOD SP TARGET SP HTTP/1.x` as
    gateway.fast_path.head_checks has checked) read, or why it is refused."""
    line_end = head.find(b"\r\n")
    method, _, target = head[: line_end - 9].partition(b" ")
    request = RequestHead(method, target)
    try:
        HttpRequestParser(request).feed_data(head)  # its head's end: no error means llhttp reached it
    except HttpParserUpgrade:
        request.plain, request.upgrade = False, True  # a protocol switch: the app's
    except HttpParserError as err:
        return bad_request(str(err) or "llhttp refused the head")  # llhttp's words: never a value
    if request.refusal is not None:
        return request.refusal
    if head[line_end - 9 : line_end] != b" HTTP/1.1":
        request.plain = False  # HTTP/1.0: the app's
    elif request.host is None:
        return NO_HOST
    if request.connection:
        named = request.connection_tokens() - {b"close", b"keep-alive"}
        if named:
            request.drop_named(named)
    return request


class Framing(Enum):
    NONE = "none"  # no body (HEAD, 1xx, 204, 304)
    LENGTH = "length"  # Content-Length
    CHUNKED = "chunked"  # passed through chunk by chunk as it is
    UNTIL_CLOSE = "until-close"  # the replica closes at its end; the client gets it chunked


class AnswerHead:
    """A replica's answer head, and how its body is delimited (class-level defaults, as RequestHead)."""

    length = 0  # the body's length, with Framing.LENGTH
    content_length: bytes | None = None
    transfer: bytes | None = None  # Transfer-Encoding's value, lowercase
    transfers = 0
    connection = b""  # the Connection headers' values, lowercase, each followed by a comma
    hop_by_hop = False  # it has hop-by-hop headers other than Transfer-Encoding
    framing = Framing.UNTIL_CLOSE
    reusable = False  # whether the replica's connection may carry another request after this answer
    # Whether the client may get the head as it came: HTTP/1.1, a body it can delimit as the replica
    # does, nothing hop-by-hop but the Transfer-Encoding of a body passed through chunk by chunk.
    verbatim = False

    def __init__(self, raw: bytes, status: int, http10: bool) -> None:
        self.raw = raw  # the head as the replica sent it, up to and including its blank line
        self.status = status
        self.http10 = http10

    def decide(self, name: bytes, value: bytes) -> None:
        """One of the headers the proxy decides on: `name` (lowercase), its `value`."""
        if name == b"content-length":  # llhttp has checked its digits, and that it is the only one
            self.content_length = value
        elif name == b"transfer-encoding":
            self.transfer = value.lower()
            self.transfers += 1
        else:
            self.hop_by_hop = True
            if name == b"connection":
                self.connection += value.lower() + b","

    def connection_tokens(self) -> frozenset[bytes]:
        return _tokens(self.connection) if self.connection else frozenset()


def parse_answer_head(head: bytes, method: bytes) -> AnswerHead | None:
    """A replica's answer head (up to and including its blank line) to a request of `method`, with its
    body's framing; None if it is malformed or says its length in a way the proxy cannot follow."""
    version = head[:9]
    if version != b"HTTP/1.1 " and version != b"HTTP/1.0 ":
        return None
    parser = HttpResponseParser(_UNHEARD)
    try:
        parser.feed_data(head)
    except _PARSE_ERRORS:
        return None
    answer = AnswerHead(head, parser.get_status_code(), version == b"HTTP/1.0 ")
    for name, value in _DECIDED_DOWN.findall(head):
        answer.decide(name.lower(), value)
    status = answer.status
    if not 100 <= status <= 999:
        return None
    keep_alive = not answer.http10 and (not answer.connection or b"close" not in answer.connection_tokens())
    if method == b"HEAD" or status < 200 or status in _NO_BODY_STATUSES:
        answer.framing, answer.reusable = Framing.NONE, keep_alive
    elif answer.transfer is not None:
        if answer.transfer != b"chunked" or answer.transfers > 1:
            return None
        answer.framing, answer.reusable = Framing.CHUNKED, keep_alive
    elif answer.content_length is not None:
        if len(answer.content_length) > 18:
            return None
        answer.framing, answer.reusable = Framing.LENGTH, keep_alive
        answer.length = int(answer.content_length)
    answer.verbatim = (
        not answer.http10
        and not answer.hop_by_hop
        and answer.framing is not Framing.UNTIL_CLOSE
        and (answer.transfer is None or answer.framing is Framing.CHUNKED)
    )
    return answer
