"""A small HTTP/1.1 client, what the worker speaks to its agents with (activities.agent_client).

The worker talks to each agent over plain HTTP, on loopback or through an SSH tunnel, and it does so a
great deal: every step of every job, and every watch. httpx spent about 1 ms of CPU per request there,
15 times what this does (`python -m bench.run --profile` shows it), and made concurrent requests queue
for one of 100 connections, so that one watch per running job could time out waiting for a connection.
This speaks just the HTTP/1.1 the agent's server (uvicorn) speaks: requests with a Content-Length body;
responses with a Content-Length or chunked body; keep-alive unless told otherwise. Timeouts are per
step, as httpx's were: connecting, sending, and each wait for response bytes may take `timeout` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

_READ_CHUNK = 1 << 20
# uvicorn closes a connection after 5 s idle: one idle longer than this is not reused (it may be closing).
_IDLE_REUSE = 4.0
_MAX_IDLE = 4096


class TransportError(Exception):
    """The server could not be reached, broke the connection, or was too slow."""


class ConnectFailed(TransportError):
    """No connection could be made: nothing of the request was sent."""


@dataclass
class Response:
    status_code: int
    reason_phrase: str
    headers: dict[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


# What a broken, refused, slow or garbled exchange raises (OSError covers resets and refusals).
_BROKEN = (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)


class _Stale(Exception):
    """A reused connection ended before any byte of the response: the server had closed it."""


class Http1Client:
    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"not a plain http URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        host = f"{self.host}:{self.port}" if ":" not in self.host else f"[{self.host}]:{self.port}"
        fixed = {"Host": host, **headers}
        self._head = "".join(f"{name}: {value}\r\n" for name, value in fixed.items())
        self._idle: list[_Connection] = []
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, object] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Response:
        if self._closed:
            raise RuntimeError("the client has been closed")
        target = self.prefix + path + (f"?{urlencode(params)}" if params else "")
        head = f"{method} {target} HTTP/1.1\r\n{self._head}"
        for name, value in (headers or {}).items():
            head += f"{name}: {value}\r\n"
        if content is not None or method not in ("GET", "HEAD", "DELETE"):
            head += f"Content-Length: {len(content or b'')}\r\n"
        message = (head + "\r\n").encode("latin-1") + (content or b"")
        limit = self.timeout if timeout is None else timeout
        while True:
            connection, reused = self._take()
            if connection is None:
                connection = await self._open(limit)
            try:
                response, keep = await self._exchange(connection, message, limit, reused)
            except _Stale:
                connection.close()
                continue  # the request never reached the server: send it on a new connection
            except BaseException:
                connection.close()
                raise
            if keep and not self._closed and len(self._idle) < _MAX_IDLE:
                connection.idle_since = time.monotonic()
                self._idle.append(connection)
            else:
                connection.close()
            return response

    def _take(self) -> tuple[_Connection | None, bool]:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since < _IDLE_REUSE and not connection.reader.at_eof():
                return connection, True
            connection.close()
        return None, False

    async def _open(self, timeout: float) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=1 << 17), timeout
            )
        except (OSError, TimeoutError) as err:
            raise ConnectFailed(f"cannot connect to {self.host}:{self.port}: {err!r}") from err
        return _Connection(reader, writer)

    async def _exchange(
        self, connection: _Connection, message: bytes, timeout: float, reused: bool
    ) -> tuple[Response, bool]:
        reader, writer = connection.reader, connection.writer
        try:
            try:
                writer.write(message)
                async with asyncio.timeout(timeout):
                    await writer.drain()
                async with asyncio.timeout(timeout):
                    status_line = await reader.readuntil(b"\r\n")
            except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as err:
                if reused and not getattr(err, "partial", b""):
                    raise _Stale() from err
                raise
            async with asyncio.timeout(timeout):
                header_block = await reader.readuntil(b"\r\n\r\n")
            version, _, rest = status_line.decode("latin-1").rstrip("\r\n").partition(" ")
            code, _, reason = rest.partition(" ")
            headers: dict[str, str] = {}
            for line in header_block.decode("latin-1").split("\r\n"):
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            if headers.get("transfer-encoding", "").lower() == "chunked":
                body = await self._read_chunked(reader, timeout)
            elif "content-length" in headers:
                body = await self._read_exactly(reader, int(headers["content-length"]), timeout)
            else:  # the body runs to the end of the connection
                body = await self._read_to_end(reader, timeout)
                headers["connection"] = "close"
        except (
            OSError,
            TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
        ) as err:
            raise TransportError(f"{self.host}:{self.port}: {err!r}") from err
        connection_header = headers.get("connection", "").lower()
        keep = connection_header != "close" and (version == "HTTP/1.1" or connection_header == "keep-alive")
        return Response(int(code), reason, headers, body), keep

    async def _read_exactly(self, reader: asyncio.StreamReader, size: int, timeout: float) -> bytes:
        parts: list[bytes] = []
        while size > 0:
            async with asyncio.timeout(timeout):
                part = await reader.read(min(size, _READ_CHUNK))
            if not part:
                raise asyncio.IncompleteReadError(b"".join(parts), size)
            parts.append(part)
            size -= len(part)
        return b"".join(parts)

    async def _read_chunked(self, reader: asyncio.StreamReader, timeout: float) -> bytes:
        parts: list[bytes] = []
        while True:
            async with asyncio.timeout(timeout):
                size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                async with asyncio.timeout(timeout):  # trailers, if any, then the empty line
                    while await reader.readuntil(b"\r\n") != b"\r\n":
                        pass
                return b"".join(parts)
            parts.append(await self._read_exactly(reader, size, timeout))
            async with asyncio.timeout(timeout):
                await reader.readexactly(2)

    async def _read_to_end(self, reader: asyncio.StreamReader, timeout: float) -> bytes:
        parts: list[bytes] = []
        while True:
            async with asyncio.timeout(timeout):
                part = await reader.read(_READ_CHUNK)
            if not part:
                return b"".join(parts)
            parts.append(part)
