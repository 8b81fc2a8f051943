"""HTTP/1.1 message heads and body framing, as the fast path (gateway.fast_path) reads them: pure parsing.

Heads are kept as raw header lines (bytes), so that what is forwarded is exactly what came, less what the
proxy drops; only the few headers the proxy decides on are decoded. A request head is parsed strictly:
anything that does not match the plain grammar here (obs-fold, bare CR or LF, a space before a colon, a
second Content-Length, a Transfer-Encoding other than `chunked` alone, ...) gives None, and the request
goes to the aiohttp app, whose parser answers it as it should (often 400). A response head is parsed as
leniently as a client must be; a malformed one is the replica's failure (502).

Body framing: a body is delimited by its Content-Length, by chunked coding (ChunkedBody follows the
chunks as they pass, without copying them), or, for an answer only, by the replica closing (UntilClose).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

MAX_HEAD = 64 * 1024  # bytes: a head without its blank line by then is not for the fast path
_MAX_CHUNK_LINE = 4096  # a chunk-size line (or trailer line) longer than this is malformed

_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_REQUEST_LINE = re.compile(rb"(" + _TOKEN + rb") ([\x21-\x7e]+) HTTP/1\.1\r\n")
# Every header line: a token, a colon, a value of visible characters, spaces and tabs (obs-text too).
_HEADER_LINES = re.compile(rb"(?:" + _TOKEN + rb":[\t\x20-\x7e\x80-\xff]*\r\n)*\r\n")
_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: [^\r\n]*)?\r\n")
_DIGITS = re.compile(rb"[0-9]{1,18}")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,15}")


class MalformedBody(ValueError):
    """A chunked body that does not follow the chunked grammar."""


class HeaderLines:
    """A head's header lines as they came (each with its CRLF), and the lowercased name of each."""

    __slots__ = ("names", "lines", "_connection")

    def __init__(self, names: list[bytes], lines: list[bytes]) -> None:
        self.names = names
        self.lines = lines
        self._connection: frozenset[bytes] | None = None

    def get(self, name: bytes) -> bytes | None:
        """The value of the first header of this (lowercase) name, stripped; None if there is none."""
        names = self.names
        if name not in names:
            return None
        return self.lines[names.index(name)].partition(b":")[2].strip()

    def count(self, name: bytes) -> int:
        return self.names.count(name)

    def connection_tokens(self) -> frozenset[bytes]:
        """The lowercase tokens of every Connection header (`close`, `keep-alive`, header names, ...)."""
        if self._connection is None:
            tokens: set[bytes] = set()
            if b"connection" in self.names:
                for name, line in zip(self.names, self.lines, strict=True):
                    if name == b"connection":
                        tokens.update(t.strip().lower() for t in line.partition(b":")[2].split(b","))
                tokens.discard(b"")
            self._connection = frozenset(tokens)
        return self._connection


def _header_lines(block: bytes) -> HeaderLines:
    """The lines of a header block (each ends with CRLF; the blank line that ends the block is not one)."""
    lines = block.split(b"\r\n")[:-2]
    names = [line.partition(b":")[0].lower() for line in lines]
    return HeaderLines(names=names, lines=[line + b"\r\n" for line in lines])


@dataclass(slots=True)
class RequestHead:
    method: str
    target: str  # the raw request target, still percent-encoded (origin form: starts with /)
    headers: HeaderLines
    length: int | None  # the body's Content-Length; None with chunked coding, 0 without a body
    chunked: bool


def parse_request_head(head: bytes) -> RequestHead | None:
    """The head (up to and including its blank line) of an HTTP/1.1 request in origin form with a plainly
    delimited body; None for anything else (the aiohttp app answers those)."""
    line = _REQUEST_LINE.match(head)
    if line is None or not _HEADER_LINES.fullmatch(head, line.end()):
        return None
    target = line.group(2)
    if not target.startswith(b"/"):
        return None
    headers = _header_lines(head[line.end() :])
    transfer = headers.get(b"transfer-encoding")
    lengths = headers.count(b"content-length")
    if transfer is not None:
        if lengths or headers.count(b"transfer-encoding") > 1 or transfer.lower() != b"chunked":
            return None
        return RequestHead(line.group(1).decode(), target.decode(), headers, None, True)
    if lengths > 1:
        return None
    length = 0
    if lengths:
        value = headers.get(b"content-length") or b""
        if not _DIGITS.fullmatch(value):
            return None
        length = int(value)
    return RequestHead(line.group(1).decode(), target.decode(), headers, length, False)


@dataclass(slots=True)
class ResponseHead:
    status: int
    status_line: bytes  # e.g. b"HTTP/1.1 200 OK\r\n", as the replica sent it
    http10: bool
    headers: HeaderLines


def parse_response_head(head: bytes) -> ResponseHead | None:
    """A replica's answer head (up to and including its blank line); None if it is malformed."""
    line = _STATUS_LINE.match(head)
    if line is None:
        return None
    block = head[line.end() :]
    if not block.endswith(b"\r\n\r\n") and block != b"\r\n":
        return None
    headers = _header_lines(block)
    return ResponseHead(int(line.group(2)), head[: line.end()], line.group(1) == b"0", headers)


class BodyFraming(ABC):
    """Where a body ends: `feed` takes the next bytes and says how many of them belong to the body."""

    done: bool = False

    @abstractmethod
    def feed(self, data: bytes) -> int: ...


class LengthBody(BodyFraming):
    def __init__(self, length: int) -> None:
        self.left = length
        self.done = length == 0

    def feed(self, data: bytes) -> int:
        taken = min(self.left, len(data))
        self.left -= taken
        self.done = self.left == 0
        return taken


class UntilClose(BodyFraming):
    """An answer delimited by the replica closing its connection: every byte belongs to it."""

    def feed(self, data: bytes) -> int:
        return len(data)


class ChunkedBody(BodyFraming):
    """Follows chunked coding (RFC 9112 7.1) across feeds: size lines, data, the last chunk, trailers."""

    _SIZE, _DATA, _DATA_END, _TRAILER = range(4)

    def __init__(self) -> None:
        self._state = self._SIZE
        self._left = 0  # of the current chunk's data, or of its CRLF
        self._line = bytearray()  # a size or trailer line, until its LF

    def feed(self, data: bytes) -> int:
        position, end = 0, len(data)
        while position < end and not self.done:
            if self._state == self._DATA:
                taken = min(self._left, end - position)
                position += taken
                self._left -= taken
                if self._left == 0:
                    self._state, self._left = self._DATA_END, 2
            elif self._state == self._DATA_END:
                expected = b"\r\n"[2 - self._left]
                if data[position] != expected:
                    raise MalformedBody("a chunk's data does not end with CRLF")
                position += 1
                self._left -= 1
                if self._left == 0:
                    self._state = self._SIZE
            else:
                position = self._take_line(data, position)
        return position

    def _take_line(self, data: bytes, position: int) -> int:
        newline = data.find(b"\n", position)
        stop = len(data) if newline < 0 else newline + 1
        self._line += data[position:stop]
        if len(self._line) > _MAX_CHUNK_LINE:
            raise MalformedBody("a chunk-size or trailer line is too long")
        if newline < 0:
            return stop
        line = bytes(self._line)
        self._line.clear()
        if not line.endswith(b"\r\n"):
            raise MalformedBody("a bare LF in chunked coding")
        if self._state == self._TRAILER:
            if line == b"\r\n":
                self.done = True
            return stop
        size = line[:-2].partition(b";")[0].strip()
        if not _CHUNK_SIZE.fullmatch(size):
            raise MalformedBody(f"a chunk size that is not hexadecimal: {size[:20]!r}")
        self._left = int(size, 16)
        self._state = self._DATA if self._left else self._TRAILER
        return stop


def chunk(data: bytes) -> bytes:
    """`data` as one chunk of chunked coding (never the last chunk: empty data gives nothing)."""
    return b"%x\r\n%b\r\n" % (len(data), data) if data else b""


LAST_CHUNK = b"0\r\n\r\n"
