"""Port forwarding for the agent's SSH server, as the job sees the network.

A job on the host's network sees what the agent sees: asyncssh's own forwarding serves it. A job in its own
network namespace (agent/network.py) has its own loopback, so a forwarded connection must be made, and a
forwarded port listened on, inside that namespace: a socket belongs to the namespace of the thread that
creates it, so each is created by a short-lived thread that has joined the namespace (setns), and then
handed to the event loop. That thread ends there: no thread of the agent is ever left in a job's namespace.

Remote forwards (`ssh -R`) listen on loopback only, whatever address the client asks for: nothing the
server opens is reachable from beyond the host (or, for an isolated job, beyond its namespace).
"""

from __future__ import annotations

import asyncio
import ctypes
import ipaddress
import os
import socket
import threading
from collections.abc import Callable
from typing import TypeVar

import asyncssh
from asyncssh.forward import SSHLocalPortForwarder
from asyncssh.listener import SSHForwardListener

from agent import network

T = TypeVar("T")

CONNECT_TIMEOUT = 10.0  # seconds, for a forwarded connection to its destination
CLONE_NEWNET = 0x40000000
_ANY_ADDRESS = {"", "*", "0.0.0.0", "::", "localhost"}


class NotLoopback(ValueError):
    pass


def loopback_address(requested: str) -> str:
    """The address a remote forward asked to listen on, made loopback: "any" and "localhost" mean
    127.0.0.1 (as sshd does without GatewayPorts), a loopback address stays; NotLoopback for the rest."""
    if requested in _ANY_ADDRESS:
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(requested)
    except ValueError:
        raise NotLoopback(f"{requested!r} is not a loopback address") from None
    if not address.is_loopback:
        raise NotLoopback(f"{requested} is not a loopback address")
    return str(address)


def _setns(fd: int) -> None:
    setns = getattr(os, "setns", None)  # Python 3.12+
    if setns is not None:
        setns(fd, CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


async def in_namespace(netns: str, make: Callable[[], socket.socket]) -> socket.socket:
    """`make()` called in a new thread that has joined `netns`; its socket, or its exception."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[socket.socket] = loop.create_future()

    def deliver(sock: socket.socket | None, error: BaseException | None) -> None:
        if future.done():  # the caller gave up (its connection closed): nobody will take the socket
            if sock is not None:
                sock.close()
        elif error is not None:
            future.set_exception(error)
        else:
            assert sock is not None
            future.set_result(sock)

    def run() -> None:
        sock: socket.socket | None = None
        error: BaseException | None
        try:
            with open(network.NETNS_DIR / netns, "rb") as namespace:  # an absolute path stays itself
                _setns(namespace.fileno())
            sock = make()
        except BaseException as exc:  # handed to the caller, whatever it is
            sock, error = None, exc
        else:
            error = None
        try:
            loop.call_soon_threadsafe(deliver, sock, error)
        except RuntimeError:  # the loop has closed (the agent is stopping): nobody will take it
            if sock is not None:
                sock.close()

    threading.Thread(target=run, name=f"ferry-netns-{netns}", daemon=True).start()
    return await future


def _connected(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
    sock.setblocking(False)
    return sock


def _listening(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def connect_in_namespace(netns: str, host: str, port: int) -> asyncssh.SSHForwarder:
    """A direct-tcpip channel's far end: a connection to host:port made inside `netns`."""
    try:
        sock = await in_namespace(netns, lambda: _connected(host, port))
    except OSError as exc:
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, str(exc)) from None
    loop = asyncio.get_running_loop()
    # What asyncssh's own forward_connection does with a connection it made itself.
    _, peer = await loop.create_connection(asyncssh.SSHForwarder, sock=sock)
    return asyncssh.SSHForwarder(peer)


async def listen(
    conn: asyncssh.SSHServerConnection, netns: str | None, requested_host: str, port: int
) -> asyncssh.SSHListener:
    """A remote forward's listener, on loopback (inside `netns` when the job has one); each connection
    to it is sent back to the client as a forwarded-tcpip channel naming the address it asked for."""
    host = loopback_address(requested_host)
    if netns is None:
        return await conn.forward_local_port(host, port, requested_host, port)
    sock = await in_namespace(netns, lambda: _listening(host, port))
    port = sock.getsockname()[1]

    async def tunnel(
        session_factory: Callable[[], asyncssh.SSHTCPSession[bytes]], orig_host: str, orig_port: int
    ) -> object:
        return await conn.create_connection(session_factory, requested_host, port, orig_host, orig_port)

    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SSHLocalPortForwarder(conn, tunnel), sock=sock)
    return SSHForwardListener(conn, [server], (requested_host, port), port)
