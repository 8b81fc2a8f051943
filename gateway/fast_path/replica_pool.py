"""The fast path's connections to replicas: asyncio protocols, kept alive and reused per replica URL.

A ReplicaConnection carries one exchange at a time (gateway.fast_path.connection's Exchange, its `user`), to
which it hands what the replica sends, its end, and its flow-control signals. Idle connections wait in the
pool, newest first, for `keepalive` seconds (4 s: under common servers' idle timeouts, uvicorn and vLLM 5 s,
as the aiohttp client's pool did); a connection the replica closes while idle leaves the pool at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from time import monotonic
from typing import Protocol, cast
from urllib.parse import urlsplit

KEEPALIVE = 4.0  # seconds an idle connection to a replica is kept
_SWEEP_EVERY = 1.0


class ReplicaUser(Protocol):
    """What uses a replica connection: the exchange in flight on it."""

    def replica_data(self, data: bytes) -> None: ...

    def replica_lost(self, exc: BaseException | None) -> None: ...

    def replica_writing_paused(self, paused: bool) -> None: ...


class ReplicaConnection(asyncio.Protocol):
    def __init__(self, pool: ReplicaPool, url: str, host: bytes) -> None:
        self.pool = pool
        self.url = url
        self.host = host  # host:port, the Host header the replica gets
        self.transport: asyncio.Transport | None = None
        self.user: ReplicaUser | None = None
        self.idle_since = 0.0  # time.monotonic()
        self.closed = False
        self.reading = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport's kin

    def data_received(self, data: bytes) -> None:
        if self.user is not None:
            self.user.replica_data(data)
        else:
            self.close()  # bytes nobody asked for: the connection cannot be trusted with a request

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost tells the user

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        user, self.user = self.user, None
        if user is not None:
            user.replica_lost(exc)
        else:
            self.pool.forget(self)

    def pause_writing(self) -> None:
        if self.user is not None:
            self.user.replica_writing_paused(True)

    def resume_writing(self) -> None:
        if self.user is not None:
            self.user.replica_writing_paused(False)

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def set_reading(self, reading: bool) -> None:
        self.reading = reading
        if self.transport is not None and not self.closed:
            with contextlib.suppress(RuntimeError):
                if reading:
                    self.transport.resume_reading()
                else:
                    self.transport.pause_reading()

    def close(self) -> None:
        """Closes it without telling its user (the user let it go, or is done with it)."""
        self.user = None
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = True


class ReplicaPool:
    def __init__(self, connect_timeout: float, keepalive: float = KEEPALIVE) -> None:
        self._connect_timeout = connect_timeout
        self._keepalive = keepalive
        self._idle: dict[str, list[ReplicaConnection]] = {}
        self._addresses: dict[str, tuple[str, int, bytes]] = {}  # url: host, port, Host header
        self._sweeping: asyncio.TimerHandle | None = None

    def take(self, url: str) -> ReplicaConnection | None:
        """An idle connection to the replica at `url`, the newest first; None if there is none."""
        idle = self._idle.get(url)
        if not idle:
            return None
        now = monotonic()
        while idle:
            connection = idle.pop()
            if now - connection.idle_since >= self._keepalive:
                connection.close()  # the replica may be closing it as we send (and the rest are older)
                for older in idle:
                    older.close()
                idle.clear()
            elif not connection.closed:
                return connection
        return None

    async def connect(self, url: str) -> ReplicaConnection:
        """A new connection to the replica at `url`; raises OSError or TimeoutError if it cannot be had."""
        address = self._addresses.get(url)
        if address is None:
            parts = urlsplit(url)
            host_header = url.partition("://")[2].encode()
            address = self._addresses[url] = (parts.hostname or "", parts.port or 80, host_header)
        host, port, host_header = address
        loop = asyncio.get_running_loop()
        _, connection = await asyncio.wait_for(
            loop.create_connection(lambda: ReplicaConnection(self, url, host_header), host, port),
            self._connect_timeout,
        )
        return connection

    def put_back(self, connection: ReplicaConnection) -> None:
        """Keeps an idle connection for the next request to its replica."""
        connection.user = None
        if connection.closed:
            return
        connection.idle_since = monotonic()
        self._idle.setdefault(connection.url, []).append(connection)
        if self._sweeping is None:
            self._sweeping = asyncio.get_running_loop().call_later(_SWEEP_EVERY, self._sweep)

    def forget(self, connection: ReplicaConnection) -> None:
        idle = self._idle.get(connection.url)
        if idle and connection in idle:
            idle.remove(connection)

    def close(self) -> None:
        """Closes every idle connection (the proxy stops)."""
        if self._sweeping is not None:
            self._sweeping.cancel()
            self._sweeping = None
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()

    def _sweep(self) -> None:
        self._sweeping = None
        now = monotonic()
        for url, idle in list(self._idle.items()):
            kept = []
            for connection in idle:
                if not connection.closed and now - connection.idle_since < self._keepalive:
                    kept.append(connection)
                else:
                    connection.close()
            if kept:
                self._idle[url] = kept
            else:
                del self._idle[url]
        if self._idle:
            self._sweeping = asyncio.get_running_loop().call_later(_SWEEP_EVERY, self._sweep)
