"""The fast path's pure parts: heads read (gateway.fast_path.heads), rewritten both ways
(gateway.fast_path.routing), and chunked bodies followed (gateway.fast_path.http1)."""

from __future__ import annotations

import random
from types import MappingProxyType

import pytest

from gateway.fast_path.head_checks import whole_head_refusal
from gateway.fast_path.heads import AnswerHead, Framing, RequestHead, parse_answer_head, parse_request_head
from gateway.fast_path.http1 import ChunkedBody, MalformedBody
from gateway.fast_path.routing import FastRoute, downstream_head, route, upstream_head
from gateway.routing_table import Replica, RoutingTable, Service, ServiceSettings
from gateway.rules import ProxyRefusal

REPLICA = Replica(id="r-0", run_id="run", url="http://10.0.0.2:8000", state="ready")


def _request(text: str) -> RequestHead:
    head = parse_request_head(text.replace("\n", "\r\n").encode() + b"\r\n")
    assert isinstance(head, RequestHead)
    return head


def _route(head: RequestHead, auth: bool = True, strip_prefix: bool = True) -> FastRoute:
    settings = ServiceSettings(auth=auth, strip_prefix=strip_prefix)
    service = Service("run", "main", "app", settings, 0, (REPLICA,), (REPLICA,))
    table = RoutingTable(services=MappingProxyType({("main", "app"): service}))
    found = route(head, table)
    assert found is not None
    return found


def _upstream(
    head: RequestHead, auth: bool = True, strip_prefix: bool = True, forward_authorization: bool = False
) -> str:
    fast_route = _route(head, auth, strip_prefix)
    return upstream_head(head, fast_route, b"10.0.0.2:8000", b"192.0.2.7", forward_authorization).decode()


def test_a_plain_request_is_forwarded_with_the_proxys_headers() -> None:
    head = _request(
        "GET /proxy/services/main/app/v1/x?q=%20 HTTP/1.1\nHost: proxy:8300\nAccept: */*\n"
        "Authorization: Bearer t\nX-Custom:  kept \n"
    )
    assert (head.method, head.target, head.host, head.authorization) == (
        b"GET",
        b"/proxy/services/main/app/v1/x?q=%20",
        b"proxy:8300",
        b"Bearer t",
    )
    assert _upstream(head) == (
        "GET /v1/x?q=%20 HTTP/1.1\r\nHost: 10.0.0.2:8000\r\nAccept: */*\r\nX-Custom: kept \r\n"
        "X-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Host: proxy:8300\r\nX-Forwarded-Proto: http\r\n"
        "X-Forwarded-Prefix: /proxy/services/main/app\r\n\r\n"
    )
    # Without `auth`, a header that carries no Ferry token is the replica's business (the fast path asks
    # the token cache); without strip_prefix the path stays whole.
    whole = _upstream(head, auth=False, strip_prefix=False, forward_authorization=True)
    assert whole.startswith("GET /proxy/services/main/app/v1/x?q=%20 HTTP/1.1\r\n")
    assert "Authorization: Bearer t\r\n" in whole and "X-Forwarded-Prefix" not in whole
    assert "Authorization" not in _upstream(head, auth=False)


def test_forwarded_headers_are_extended_or_kept() -> None:
    head = _request(
        "POST /proxy/services/main/app/ HTTP/1.1\nHost: p\nX-Forwarded-For: 203.0.113.1\n"
        "X-Forwarded-Proto: https\nX-Forwarded-Host: example.com\nX-Forwarded-Prefix: /outer\n"
        "Content-Length: 3\n"
    )
    assert (head.length, head.chunked) == (3, False)
    sent = _upstream(head, strip_prefix=False)
    assert "X-Forwarded-For: 203.0.113.1, 192.0.2.7\r\n" in sent
    for kept in ("X-Forwarded-Proto: https", "X-Forwarded-Host: example.com", "X-Forwarded-Prefix: /outer"):
        assert sent.count(kept.split(":")[0]) == 1 and kept + "\r\n" in sent
    assert sent.endswith("Content-Length: 3\r\n\r\n")
    stripped = _upstream(head)
    assert "X-Forwarded-Prefix: /proxy/services/main/app\r\n" in stripped and "/outer" not in stripped


def test_hop_by_hop_headers_stay_behind() -> None:
    head = _request(
        "PUT /proxy/services/main/app/ HTTP/1.1\nHost: p\nConnection: close, X-Private\nX-Private: 1\n"
        "Keep-Alive: timeout=5\nTE: trailers\nTransfer-Encoding: chunked\nX-Public: 2\n"
    )
    assert head.chunked and head.connection_tokens() == {b"close", b"x-private"}
    sent = _upstream(head)
    assert "X-Public: 2\r\n" in sent and sent.endswith("Transfer-Encoding: chunked\r\n\r\n")
    for gone in ("X-Private", "Keep-Alive", "TE:", "Connection"):
        assert gone not in sent


@pytest.mark.parametrize(
    "text",
    [
        "GET /a HTTP/1.0\nHost: p\n",  # HTTP/1.0
        "POST /a HTTP/1.1\nHost: p\nTransfer-Encoding: gzip, chunked\n",
        "GET /a HTTP/1.1\nHost: p\nUpgrade: websocket\nConnection: Upgrade\n",
        "PUT /a HTTP/1.1\nHost: p\nContent-Length: 2\nExpect: 100-continue\n",
    ],
)
def test_unusual_request_heads_are_the_apps(text: str) -> None:
    head = parse_request_head(text.replace("\n", "\r\n").encode("latin-1") + b"\r\n")
    assert isinstance(head, RequestHead) and not head.plain


@pytest.mark.parametrize(
    ("text", "status", "words"),
    [
        ("GET /a HTTP/1.1\n", 400, "needs one Host header"),
        ("GET /a HTTP/1.1\nHost: p\nHost: q\n", 400, "more than one Host header"),
        (
            "GET /a HTTP/1.1\nHost: p\nAuthorization: a\nAuthorization: b\n",
            400,
            "more than one Authorization",
        ),
        ("GET /a HTTP/1.1\nHost: p\nBad Header: y\n", 400, "Invalid header token"),
        ("GET /a HTTP/1.1\nHost: p\nX: folded\n  on\n", 400, "whitespace"),  # obs-fold
        ("GET /a HTTP/1.1\nHost: p\nAuthorization : Bearer secret\n", 400, "Invalid header token"),
        ("GET /a HTTP/1.1\nHost: p\nX: \x01\n", 400, "Invalid header value char"),
        (
            "POST /a HTTP/1.1\nHost: p\nContent-Length: 1\nContent-Length: 1\n",
            400,
            "Duplicate Content-Length",
        ),
        ("POST /a HTTP/1.1\nHost: p\nContent-Length: 1\nTransfer-Encoding: chunked\n", 400, "Content-Length"),
        ("POST /a HTTP/1.1\nHost: p\nContent-Length: +1\n", 400, "Content-Length"),
        ("POST /a HTTP/1.1\nHost: p\nTransfer-Encoding: gzip\n", 400, "Transfer-Encoding"),
        ("GET /a RTSP/1.1\nHost: p\n", 400, "METHOD TARGET HTTP/1.1"),
        ("CONNECT p:443 HTTP/1.1\nHost: p\n", 400, "neither a path nor an http(s) URL"),
        ("OPTIONS * HTTP/1.1\nHost: p\n", 400, "neither a path nor an http(s) URL"),
        ("GET /a HTTP/2.0\nHost: p\n", 505, "HTTP/1.1 and HTTP/1.0"),
        ("GET /\xe9 HTTP/1.1\nHost: p\n", 400, "Invalid char in url"),
        ("GET /a HTTP/1.1\nHost: p\nX: y\n" + "X: y\n" * 100, 431, "more than 100 header lines"),
        ("GET /a HTTP/1.1\nHost: p\nX: " + "y" * 8200 + "\n", 431, "header line is longer than 8190"),
        ("GET /" + "a" * 8200 + " HTTP/1.1\nHost: p\n", 414, "request line is longer than 8190"),
        ("GET /a HTTP/1.1\nHost: p\n" + ("X: " + "y" * 8000 + "\n") * 9, 431, "larger than 65536 bytes"),
    ],
)
def test_malformed_or_oversized_heads_are_refused_without_their_values(
    text: str, status: int, words: str
) -> None:
    raw = text.replace("\n", "\r\n").encode("latin-1") + b"\r\n"
    refusal = whole_head_refusal(raw) or parse_request_head(raw)
    assert isinstance(refusal, ProxyRefusal)
    assert refusal.status == status and words in refusal.message
    assert "secret" not in refusal.message and "yy" not in refusal.message


def test_a_bare_lf_is_refused() -> None:
    refusal = whole_head_refusal(b"GET /a HTTP/1.1\r\nHost: p\nX: y\r\n\r\n")
    assert refusal is not None and "bare LF" in refusal.message


def _answer(text: str, method: bytes = b"GET") -> AnswerHead | None:
    return parse_answer_head(text.replace("\n", "\r\n").encode() + b"\r\n", method)


@pytest.mark.parametrize(
    ("text", "method", "framing", "length", "reusable", "verbatim"),
    [
        ("HTTP/1.1 200 OK\nContent-Length: 12\nServer: x\n", b"GET", Framing.LENGTH, 12, True, True),
        ("HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n", b"GET", Framing.CHUNKED, 0, True, True),
        ("HTTP/1.1 200 OK\nContent-Type: text/plain\n", b"GET", Framing.UNTIL_CLOSE, 0, False, False),
        ("HTTP/1.1 200 OK\nContent-Length: 5\n", b"HEAD", Framing.NONE, 0, True, True),
        ("HTTP/1.1 204 No Content\n", b"DELETE", Framing.NONE, 0, True, True),
        ("HTTP/1.1 304 Not Modified\nTransfer-Encoding: chunked\n", b"GET", Framing.NONE, 0, True, False),
        ("HTTP/1.1 200 OK\nContent-Length: 1\nConnection: close\n", b"GET", Framing.LENGTH, 1, False, False),
        (
            "HTTP/1.1 200 OK\nContent-Length: 1\nKeep-Alive: timeout=5\n",
            b"GET",
            Framing.LENGTH,
            1,
            True,
            False,
        ),
        ("HTTP/1.0 200 OK\nContent-Length: 1\n", b"GET", Framing.LENGTH, 1, False, False),
    ],
)
def test_answer_heads_say_how_their_body_ends(
    text: str, method: bytes, framing: Framing, length: int, reusable: bool, verbatim: bool
) -> None:
    answer = _answer(text, method)
    assert answer is not None
    assert (answer.framing, answer.length, answer.reusable, answer.verbatim) == (
        framing,
        length,
        reusable,
        verbatim,
    )


@pytest.mark.parametrize(
    "text",
    [
        "HTTP/1.1 200 OK\nTransfer-Encoding: gzip\n",
        "HTTP/1.1 200 OK\nContent-Length: 1\nContent-Length: 1\n",
        "HTTP/1.1 200 OK\nContent-Length: 1, 1\n",
        "HTTP/1.1 200 OK\nBad Header: 1\n",
        "HTTP/1.1 101 Switching Protocols\nUpgrade: websocket\nConnection: upgrade\n",
        "HTTP/2 200 OK\n",
        "ICE/1.0 200 OK\n",
    ],
)
def test_answer_heads_the_proxy_cannot_follow(text: str) -> None:
    assert _answer(text) is None


def test_an_answer_head_goes_as_it_came_or_rebuilt() -> None:
    plain = _answer("HTTP/1.1 200 OK\nContent-Length: 2\nX-A: 1\n")
    assert plain is not None
    assert downstream_head(plain, close=False) == plain.raw
    assert downstream_head(plain, close=True) == plain.raw[:-2] + b"Connection: close\r\n\r\n"
    old = _answer("HTTP/1.0 200 Fine\nKeep-Alive: 5\nConnection: keep-alive, X-B\nX-B: 2\nX-A: 1\n")
    assert old is not None and old.framing is Framing.UNTIL_CLOSE
    assert downstream_head(old, close=False) == (
        b"HTTP/1.1 200 Fine\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
    )


def _chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x;ext=1\r\n%b\r\n" % (len(p), p) for p in pieces) + b"0\r\nTrailer-A: x\r\n\r\n"


def test_a_chunked_body_is_followed_however_it_is_cut() -> None:
    body = _chunked([b"data: one\n\n", b"x" * 5000, b"\r\n"])
    shuffle = random.Random(7)
    for _ in range(300):
        cuts = sorted(shuffle.sample(range(1, len(body)), shuffle.randint(0, 12)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        pieces[-1] += b"GET /next HTTP/1.1\r\n"  # what follows the body is not taken
        framing, taken = ChunkedBody(), 0
        for piece in pieces:
            taken += framing.feed(piece)
        assert framing.done and taken == len(body)


@pytest.mark.parametrize("body", [b"5\r\nhelloXX", b"zz\r\n", b"5\nhello\r\n", b"1" * 5000])
def test_a_malformed_chunked_body_is_refused(body: bytes) -> None:
    with pytest.raises(MalformedBody):
        ChunkedBody().feed(body)
