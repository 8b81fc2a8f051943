"""HTTP/1.1 bodies as the fast path (gateway.fast_path.connection) follows them: pure parsing (heads:
gateway.fast_path.heads).

A body is delimited by its Content-Length, by chunked coding (ChunkedBody follows the chunks as they pass,
without copying them), or, for an answer only, by the replica closing (UntilClose).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod

MAX_ANSWER_HEAD = 64 * 1024  # bytes: a replica's answer head without its blank line by then is malformed
_MAX_CHUNK_LINE = 4096  # a chunk-size line (or trailer line) longer than this is malformed

_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,15}")


class MalformedBody(ValueError):
    """A chunked body that does not follow the chunked grammar."""


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
            state = self._state
            if state == self._DATA:
                taken = min(self._left, end - position)
                position += taken
                self._left -= taken
                if self._left == 0:
                    self._state, self._left = self._DATA_END, 2
            elif state == self._DATA_END:
                left = self._left
                if left == 2 and end - position >= 2:  # most often: the CRLF is here whole
                    if data[position : position + 2] != b"\r\n":
                        raise MalformedBody("a chunk's data does not end with CRLF")
                    position += 2
                    self._state = self._SIZE
                    continue
                if data[position] != b"\r\n"[2 - left]:
                    raise MalformedBody("a chunk's data does not end with CRLF")
                position += 1
                self._left = left - 1
                if left == 1:
                    self._state = self._SIZE
            else:
                position = self._take_line(data, position)
        return position

    def _take_line(self, data: bytes, position: int) -> int:
        newline = data.find(b"\n", position)
        if newline < 0:
            self._line += data[position:]
            if len(self._line) > _MAX_CHUNK_LINE:
                raise MalformedBody("a chunk-size or trailer line is too long")
            return len(data)
        stop = newline + 1
        if self._line:  # its start came in an earlier feed
            self._line += data[position:stop]
            line = bytes(self._line)
            self._line.clear()
        else:
            line = data[position:stop]
        if len(line) > _MAX_CHUNK_LINE:
            raise MalformedBody("a chunk-size or trailer line is too long")
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
