"""Processes the embedded stack starts and stops: is a pid (still) ours, stop it, is a port free; and
the files they keep under FERRY_HOME, private to the user."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import time
from collections.abc import Callable
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


def listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` itself holds a listening TCP socket on `port` (Linux's /proc). A port open
    to a connect may be another stack's: two stacks started at the same moment can choose the same free
    port, and only one binds it (docs/chaos.md#temporal-on-another-port)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{inode}]")
    if not inodes:
        return False
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for descriptor in descriptors:
        with contextlib.suppress(OSError):
            if os.readlink(descriptor) in inodes:
                return True
    return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- private files ----------------------------------------------------------------------------------
# FERRY_HOME holds the agent's token and, in ferry.db and temporal.db, every run's env in clear: only its
# owner may read any of it. What Ferry creates there is created private (PRIVATE_UMASK for the processes
# the stack starts, `private_opener` for the files a command writes); `make_private` fixes what is not.

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
PRIVATE_UMASK = 0o077


class NotPrivate(RuntimeError):
    """A file under FERRY_HOME is readable by others and cannot be made private (another user's)."""


def private_opener(path: str, flags: int) -> int:
    """For `open(..., opener=private_opener)`: a file created 0600, never readable by others meanwhile."""
    return os.open(path, flags, PRIVATE_FILE)


def private_dir(path: Path) -> Path:
    """`path` created 0700 if missing (its parents as usual); `make_private` fixes an existing one."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    return path


def make_private(root: Path, skip: Callable[[Path], bool] = lambda path: False) -> list[str]:
    """Directories under `root` (and `root`) made 0700 and regular files 0600 where they were wider;
    one line for each change: which path, from which mode to which. Directories for which `skip` is
    true are left as they are, with what is in them (the jobs' code: its modes are the repository's).
    Symbolic links, sockets and the like are left too. NotPrivate if a wide one is not ours to change."""
    changes: list[str] = []
    if not root.exists():
        return changes
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            changes += _narrow(directory, PRIVATE_DIR)
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            continue  # removed meanwhile (a task's directory, by the agent that removed the task)
        for entry in entries:
            path = Path(entry.path)
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not skip(path):
                        pending.append(path)
                elif entry.is_file(follow_symlinks=False):
                    changes += _narrow(path, PRIVATE_FILE)
            except FileNotFoundError:
                continue
    return changes


def job_code(path: Path) -> bool:
    """A task's workdir under the agent's data (agent/data/tasks/<id>/workdir): the job's code, whose
    modes (executables) are the repository's; the 0700 task directory above it keeps others out. Likewise
    the named volumes' directories (agent/data/volumes, docs/volumes.md): the jobs' data, in modes and
    owners of the jobs' choosing (a container's user may not be this one), behind the 0700 data directory."""
    if path.name == "volumes" and path.parent.name == "data" and path.parent.parent.name == "agent":
        return True
    return path.name == "workdir" and path.parent.parent.name == "tasks"


def _narrow(path: Path, wanted: int) -> list[str]:
    st = path.lstat()
    mode = stat.S_IMODE(st.st_mode)
    if not mode & ~wanted & 0o777:
        return []
    narrowed = mode & wanted  # never adds a permission: a 0400 file stays 0400
    if st.st_uid != os.geteuid():
        raise NotPrivate(
            f"{path} is mode {mode:04o} and owned by uid {st.st_uid}, not by you (uid {os.geteuid()}): "
            f"it holds secrets and cannot be made private; chmod {narrowed:o} it or use another FERRY_HOME"
        )
    try:
        os.chmod(path, narrowed, follow_symlinks=False)
    except PermissionError as err:
        raise NotPrivate(f"{path} is mode {mode:04o} and cannot be made private: {err.strerror}") from None
    return [f"{path} was mode {mode:04o}, readable by others: now {narrowed:04o}"]
