"""Generated requests (hypothesis) against both paths of the proxy: the fast path's proxy and one that
hands every request to the aiohttp app, in front of the same recording replica (tests/gateway/
test_hostile_clients.py). For every request: neither forwards a Ferry token, neither answers 5xx, and
both agree on whether it is served (2xx, 3xx) or refused (4xx, and 505 for another HTTP version)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway.conftest import TOKEN
from tests.gateway.test_hostile_clients import Proxies, exchange, proxies, status_of

__all__ = ["proxies"]  # the fixture, used by name

_TOKEN_CHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_NAMES = st.text(alphabet=_TOKEN_CHARS, min_size=1, max_size=12) | st.sampled_from(
    ["X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Prefix", "Connection", "Keep-Alive", "TE", "Cookie"]
)
_VALUES = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20
) | st.sampled_from(
    ["", " padded ", "a\tb", "\x01", "\x7f", "é", "close", "keep-alive, X-Other", "authorization"]
)
_AUTHORIZATIONS = st.sampled_from(
    [
        None,
        f"Authorization: Bearer {TOKEN}",
        f"authorization: bearer {TOKEN}",
        f"Authorization: Token {TOKEN}",
        f"Authorization: {TOKEN}",
        f"Authorization : Bearer {TOKEN}",
        f"Authorization: Bearer {TOKEN}\r\nAuthorization: Bearer other",
        "Authorization: Bearer someone-elses",
        f"X-Api-Key-{TOKEN}: 1",  # a token where no header value is: in a name
    ]
)
_PATHS = st.lists(
    st.sampled_from(["a", "b", "", ".", "..", "%2e%2e", "%2E", "%2F", "x?y=1", "%00", "%", ";p", "~"]),
    max_size=4,
).map("/".join)
_TARGETS = st.one_of(
    st.tuples(st.sampled_from(["public", "private", "llm", "nope", "%70ublic", "pub%2Flic"]), _PATHS).map(
        lambda t: f"/proxy/services/main/{t[0]}/{t[1]}"
    ),
    st.sampled_from(
        [
            "/healthz",
            "/proxy/services/main/public",
            "/proxy/models/main/v1/models",
            "//proxy/services/main/public/x",
            "*",
            "http://proxy.test/proxy/services/main/public/abs",
            "proxy/services/main/public/x",
        ]
    ),
)


@dataclass
class Generated:
    method: str
    target: str
    version: str
    host: int  # how many Host headers
    authorization: str | None
    extra: list[tuple[str, str]]
    framing: str  # how the body is delimited
    body: bytes
    line_end: str

    def data(self) -> bytes:
        lines = [f"{self.method} {self.target} {self.version}".rstrip()]
        lines += ["Host: proxy.test"] * self.host
        if self.authorization:
            lines.append(self.authorization)
        lines += [f"{name}: {value}" for name, value in self.extra]
        body = self.body
        if self.framing == "length":
            lines.append(f"Content-Length: {len(body)}")
        elif self.framing == "chunked":
            lines.append("Transfer-Encoding: chunked")
            body = (b"%x\r\n%b\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
        elif self.framing == "bad-chunked":
            lines.append("Transfer-Encoding: chunked")
            body = b"zz\r\n" + body + b"\r\n0\r\n\r\n"
        elif self.framing == "both":
            lines += [f"Content-Length: {len(body)}", "Transfer-Encoding: chunked"]
        lines.append("Connection: close")
        head = self.line_end.join(lines).encode("utf-8") + (self.line_end * 2).encode()
        return head + body


_REQUESTS = st.builds(
    Generated,
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH", "get", "G(T"]),
    target=_TARGETS,
    version=st.sampled_from(["HTTP/1.1"] * 6 + ["HTTP/1.0", "HTTP/2.0", "HTTP/1.1 x", ""]),
    host=st.sampled_from([1, 1, 1, 1, 0, 2]),
    authorization=_AUTHORIZATIONS,
    extra=st.lists(st.tuples(_NAMES, _VALUES), max_size=4),
    framing=st.sampled_from(["none", "none", "length", "chunked", "bad-chunked", "both"]),
    body=st.binary(max_size=40).filter(lambda b: TOKEN.encode() not in b),
    line_end=st.sampled_from(["\r\n"] * 8 + ["\n"]),
)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(request=_REQUESTS)
async def test_both_paths_agree_and_forward_no_token(
    proxies: Proxies, caplog: pytest.LogCaptureFixture, request: Generated
) -> None:
    caplog.set_level(logging.INFO)
    data = request.data()
    statuses = []
    for name, base in proxies.both:
        answer = await exchange(base, data, timeout=4.0)
        status = status_of(answer)
        # 505 is the proxy's refusal of another HTTP version: the client's error, in HTTP's numbering.
        assert 200 <= status < 500 or status == 505, (name, data, answer[:300])
        statuses.append(status)
    assert statuses[0] // 100 == statuses[1] // 100 or {statuses[0], statuses[1]} <= {200, 204, 301, 308}, (
        statuses,
        data,
    )
    assert not proxies.recorder.saw(TOKEN), data
    assert TOKEN not in caplog.text, data
    # aiohttp refuses nothing the front door let through (it would log a traceback and echo the head).
    assert not [record for record in caplog.records if record.name == "aiohttp.server"], data
