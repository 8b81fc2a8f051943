"""The limits every request head is held to before either path of the proxy sees it (gateway.rules):
its size, its number of header lines, the length of each line, CRLF line ends, and an HTTP/1.x request
line. Pure: bytes in, a ProxyRefusal or nothing out.

`whole_head_refusal` checks a head that came whole, most often in one read: a few scans in C. A head still
coming is checked as it comes by a HeadScan, each byte once, so that a refusal comes as soon as its
reason has arrived (a bare LF at once, not after the head's timeout), and a head trickled a byte at a
time costs no more than one sent at once.
"""

from __future__ import annotations

import re

from gateway.rules import (
    BARE_CR,
    BARE_LF,
    HEAD_TOO_LARGE,
    HEADER_LINE_TOO_LONG,
    MAX_HEAD,
    MAX_HEADERS,
    MAX_LINE,
    NOT_A_TARGET,
    NOT_HTTP1,
    REQUEST_LINE_TOO_LONG,
    TOO_MANY_HEADERS,
    VERSION,
    ProxyRefusal,
)

_HTTP_VERSION = re.compile(rb" HTTP/[0-9]\.[0-9]\Z")


def request_line_refusal(line: bytes) -> ProxyRefusal | None:
    """A request line (without its CRLF) that is not `METHOD SP TARGET SP HTTP/1.x`, its target a path
    or an http(s) URL (the proxy is no forward proxy: no CONNECT, no `*`): why not."""
    if len(line) > MAX_LINE:
        return REQUEST_LINE_TOO_LONG
    version = line[-9:]
    if version == b" HTTP/1.1" or version == b" HTTP/1.0":
        if line.count(b" ") != 2:
            return NOT_HTTP1
        target = line[line.find(b" ") + 1 : -9]
        if target[:1] == b"/" or target[:7].lower() == b"http://" or target[:8].lower() == b"https://":
            return None
        return NOT_A_TARGET
    if _HTTP_VERSION.search(line) and line.count(b" ") == 2:
        return VERSION
    return NOT_HTTP1  # HTTP/0.9's `GET /` among others


def whole_head_refusal(head: bytes) -> ProxyRefusal | None:
    """Why a whole head (up to and including its blank line) is refused, or None."""
    size = len(head)
    if size > MAX_HEAD:
        return HEAD_TOO_LARGE
    lines = head.count(b"\r\n")  # the request line, the header lines, the blank line
    if head.count(b"\n") != lines:
        return BARE_LF
    if head.count(b"\r") != lines:
        return BARE_CR
    if lines - 2 > MAX_HEADERS:
        return TOO_MANY_HEADERS
    line_end = head.find(b"\r\n")
    refusal = request_line_refusal(head[:line_end])
    if refusal is not None:
        return refusal
    if size > MAX_LINE and any(len(line) > MAX_LINE for line in head[line_end + 2 :].split(b"\r\n")):
        return HEADER_LINE_TOO_LONG
    return None


class HeadScan:
    """A head still coming: its lines checked as they complete, each byte looked at once."""

    __slots__ = ("_checked", "_lines")

    def __init__(self) -> None:
        self._checked = 0  # bytes of the buffer in whole lines already checked
        self._lines = 0  # whole lines so far, the request line included

    def refusal(self, buffer: bytes) -> ProxyRefusal | None:
        """Why the head begun in `buffer` (which grows between calls, and has no blank line yet) is
        refused already, or None."""
        if len(buffer) > MAX_HEAD:
            return HEAD_TOO_LARGE
        start = self._checked
        while True:
            newline = buffer.find(b"\n", start)
            if newline < 0:
                break
            if newline == 0 or buffer[newline - 1] != 13:  # 13: CR
                return BARE_LF
            line = buffer[start : newline - 1]
            if b"\r" in line:
                return BARE_CR
            if self._lines == 0:
                refusal = request_line_refusal(line)
                if refusal is not None:
                    return refusal
            elif len(line) > MAX_LINE:
                return HEADER_LINE_TOO_LONG
            self._lines += 1
            if self._lines - 1 > MAX_HEADERS:
                return TOO_MANY_HEADERS
            start = newline + 1
        self._checked = start
        if len(buffer) - start > MAX_LINE + 1:  # a line not ended yet is too long already
            return REQUEST_LINE_TOO_LONG if self._lines == 0 else HEADER_LINE_TOO_LONG
        return None
