"""How Ferry opens an SSH connection (`open_ssh`); and a local port whose every connection is carried over
an SSH connection to a host and port beyond it (a direct-tcpip channel, `LocalTunnel`): how the worker
reaches an agent on an SSH host (activities/ssh_host.py) or on a Slurm node behind its login node
(activities/slurm_backend.py). The SSH connection is asked for at each new local connection, so one
re-established after a dead link serves the same local port.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import asyncssh

from activities.ssh_config import DeployOptions

_PIPE_CHUNK = 256 * 1024


async def open_ssh(
    hostname: str, port: int, user: str, keys: Sequence[Any], options: DeployOptions, tunnel: Any = ()
) -> asyncssh.SSHClientConnection:
    """An SSH connection as Ferry makes them (an SSH host's, a login node's): key-only (no agent, no
    ssh_config), host keys checked against `options.known_hosts` (None: any), the options' keepalives, at
    most `connect_timeout` seconds. OSError, asyncssh.Error or TimeoutError when it cannot."""
    known = options.known_hosts
    return await asyncio.wait_for(
        asyncssh.connect(
            hostname,
            port,
            tunnel=tunnel,
            username=user,
            client_keys=keys,
            known_hosts=None if known is None else str(Path(known).expanduser()),
            agent_path=None,
            config=None,
            password_auth=False,
            kbdint_auth=False,
            keepalive_interval=options.keepalive_interval,
            keepalive_count_max=options.keepalive_count_max,
            connect_timeout=options.connect_timeout,
        ),
        options.connect_timeout,
    )


class LocalTunnel:
    def __init__(
        self,
        connection: Callable[[], Awaitable[asyncssh.SSHClientConnection]],
        destination: Callable[[], tuple[str, int]],
        connect_timeout: float,
    ) -> None:
        self._connection = connection
        self._destination = destination
        self._timeout = connect_timeout
        self._server: asyncio.Server | None = None
        self._open_writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._forward, "127.0.0.1", 0)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One local connection, carried over a channel of the (re-established) connection.

        A server's handler: cancellation (the worker stopping) closes both ends and ends it quietly."""
        remote_writer: Any = None
        self._open_writers.add(writer)
        try:
            conn = await self._connection()
            host, port = self._destination()
            remote_reader, remote_writer = await asyncio.wait_for(
                conn.open_connection(host, port), self._timeout
            )
            upstream = asyncio.ensure_future(_pipe(reader, remote_writer))
            try:  # the far side ending (or the channel dying) ends the local connection too
                await _pipe(remote_reader, writer)
            finally:
                upstream.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await upstream
        except (OSError, asyncssh.Error, TimeoutError, RuntimeError, asyncio.CancelledError):
            pass
        finally:
            self._open_writers.discard(writer)
            if remote_writer is not None:
                remote_writer.close()
            writer.close()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._open_writers):
            writer.close()


async def _pipe(reader: Any, writer: Any) -> None:
    with contextlib.suppress(OSError, asyncssh.Error, ConnectionError, RuntimeError):
        while data := await reader.read(_PIPE_CHUNK):
            writer.write(data)
            await writer.drain()
        writer.write_eof()
