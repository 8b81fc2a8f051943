"""Processes the embedded stack starts and stops: is a pid (still) ours, stop it, is a port free."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path

STOP_TIMEOUT = 10.0


def pid_alive(pid: int | None, marker: str | None = None) -> bool:
    """Whether `pid` is a live process (not a zombie) whose command line contains `marker`."""
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return marker is None  # someone else's process: not ours unless we cannot tell
    proc = Path(f"/proc/{pid}")
    if not proc.exists():
        return True  # no procfs (macOS): trust the signal
    try:
        stat = (proc / "stat").read_text()
        if stat[stat.rindex(")") + 2 :].startswith("Z"):
            return False
        if marker is not None:
            return marker in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError):
        return False
    return True


def terminate(pid: int | None, marker: str | None, timeout: float = STOP_TIMEOUT) -> bool:
    """SIGTERM, then SIGKILL after `timeout`; True if there was such a process to stop."""
    if not pid_alive(pid, marker):
        return False
    assert pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid, marker):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
        _reap(pid)
        time.sleep(0.02)
    return True


def _reap(pid: int) -> None:
    # Our own child (the foreground server, or a command that started the stack): collect its status.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server's own listener does
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
