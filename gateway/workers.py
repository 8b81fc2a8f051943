"""More than one proxy process on one port: a supervisor and its workers (`python -m gateway --workers N`).

One proxy process is bounded by one CPU: its event loop runs every request. With `--workers N` (N > 1) the
process started becomes a supervisor that serves nothing itself: it forks N workers, each a whole,
independent proxy (gateway.main.serve: its own routing table and refresh, store heartbeat, drain marks,
request counts, pool of replica connections) listening on the same host:port with SO_REUSEPORT, so that
the kernel spreads the incoming connections over them. Each worker is a proxy of its own in the store
(its own gateway id, kept by its slot across restarts): a draining replica waits for each of them to mark
it drained, and the autoscaler reads the request counts of every proxy summed (store.request_count).

The supervisor forks before it opens anything (no event loop, no thread, no store), so each worker starts
clean. It writes the ready file (its own pid) once every worker listens. A worker that dies is forked
again in its slot (at once if it had served for a while, else after a growing pause, up to 10 s); one
that dies before the first ready file is written fails the start: the supervisor stops the others and
exits 1, as a single proxy that cannot listen does. SIGTERM or SIGINT to the supervisor is passed on to
every worker as SIGTERM: each shuts down gracefully (held requests 503, those in flight finished, its
record removed from the store); the supervisor exits once they have all exited (SIGKILL to those still
there after `shutdown_timeout` + KILL_AFTER s). A worker asks the kernel for SIGTERM if the supervisor
dies (PR_SET_PDEATHSIG), so none outlives it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import select
import signal
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

# Seconds past the workers' own shutdown_timeout (5 s) before the supervisor SIGKILLs them: within the
# embedded stack's 10 s before it SIGKILLs the supervisor (embedded.processes.terminate).
KILL_AFTER = 3.0
SERVED_LONG_ENOUGH = 10.0  # a worker that ran this long is forked again at once when it dies
MAX_PAUSE = 10.0  # the longest pause before forking again a worker that keeps dying
_PR_SET_PDEATHSIG = 1
_SIGNALS = (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT)


@dataclass
class _Slot:
    number: int
    gateway_id: str
    pid: int | None = None
    started: float = 0.0
    ready: bool = False
    failures: int = 0  # deaths in a row, each soon after its start
    due: float | None = None  # monotonic time to fork it again
    exits: list[int] = field(default_factory=list)


def check_port_free(host: str, port: int) -> int:
    """The port to serve on: `port`, or a free one for 0. OSError (EADDRINUSE) if something listens there:
    the workers' SO_REUSEPORT would share the port with another proxy of this user's instead of failing."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the workers' listeners do
        sock.bind((host or "0.0.0.0", port))
        return int(sock.getsockname()[1])


def supervise(
    workers: int,
    serve_worker: Callable[[str, Callable[[], None]], None],
    *,
    ready_file: Path | None,
    shutdown_timeout: float,
    write_ready: Callable[[Path, str], None],
) -> int:
    """Runs `workers` forked processes, each `serve_worker(gateway_id, ready)` (which serves until SIGTERM
    and calls `ready()` once it listens), until SIGTERM or SIGINT; the exit status (0, or 1 when the start
    failed)."""
    slots = [_Slot(number=i, gateway_id=str(uuid.uuid4())) for i in range(workers)]
    ready_r, ready_w = os.pipe()  # each worker writes "<slot> <pid>\n" once it listens
    wake_r, wake_w = os.pipe()  # the signals' wake-up bytes
    for fd in (ready_r, wake_r, wake_w):
        os.set_blocking(fd, False)
    for fd in (ready_r, ready_w, wake_r, wake_w):
        os.set_inheritable(fd, False)
    previous = {signum: signal.signal(signum, _note) for signum in _SIGNALS}
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    context = _Context(ready_w, (ready_r, wake_r, wake_w), serve_worker)
    stopping_since: float | None = None
    all_ready = False
    status = 0
    pending = b""
    try:
        for slot in slots:
            context.fork(slot)
        while True:
            now = time.monotonic()
            if stopping_since is not None:
                if not any(slot.pid for slot in slots):
                    break
                if now - stopping_since > shutdown_timeout + KILL_AFTER:
                    for slot in slots:
                        _kill(slot.pid, signal.SIGKILL)
            else:
                for slot in slots:
                    if slot.pid is None and slot.due is not None and slot.due <= now:
                        context.fork(slot)
            due = [s.due for s in slots if s.pid is None and s.due is not None and stopping_since is None]
            timeout = max(0.0, min(due) - now) if due else 1.0
            try:
                readable, _, _ = select.select([ready_r, wake_r], [], [], timeout)
            except InterruptedError:
                readable = []
            signums: set[int] = set()
            if wake_r in readable:
                with contextlib.suppress(BlockingIOError):
                    signums = set(os.read(wake_r, 4096))
            if ready_r in readable:
                with contextlib.suppress(BlockingIOError):
                    pending += os.read(ready_r, 4096)
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    number, pid = (int(part) for part in line.split())
                    slot = slots[number]
                    if slot.pid == pid:
                        slot.ready = True
                        log.info("proxy worker %d (pid %d, proxy %s) listening", number, pid, slot.gateway_id)
                if not all_ready and all(slot.ready for slot in slots):
                    all_ready = True
                    if ready_file is not None:
                        write_ready(ready_file, str(os.getpid()))
            if (signal.SIGTERM in signums or signal.SIGINT in signums) and stopping_since is None:
                log.info("proxy supervisor shutting down its %d workers", workers)
                stopping_since = time.monotonic()
                for slot in slots:
                    _kill(slot.pid, signal.SIGTERM)
            for pid, code in _reap():
                ended = next((s for s in slots if s.pid == pid), None)
                if ended is None:
                    continue
                slot = ended
                lived = time.monotonic() - slot.started
                slot.pid = None
                if stopping_since is not None:
                    continue
                if not all_ready:
                    log.error("proxy worker %d exited (%s) before it listened: stopping", slot.number, code)
                    status = 1
                    stopping_since = time.monotonic()
                    for other in slots:
                        _kill(other.pid, signal.SIGTERM)
                    continue
                slot.failures = 0 if slot.ready and lived >= SERVED_LONG_ENOUGH else slot.failures + 1
                pause = 0.0 if slot.failures == 0 else min(0.5 * 2 ** (slot.failures - 1), MAX_PAUSE)
                slot.due = time.monotonic() + pause
                log.warning(
                    "proxy worker %d (pid %d) exited (%s) after %.1f s; starting it again in %.1f s",
                    slot.number,
                    pid,
                    code,
                    lived,
                    pause,
                )
    finally:
        signal.set_wakeup_fd(-1)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for slot in slots:  # only after an error of the supervisor's own
            _kill(slot.pid, signal.SIGKILL)
        for fd in (ready_r, ready_w, wake_r, wake_w):
            os.close(fd)
    return status


class _Context:
    def __init__(
        self,
        ready_w: int,
        close_in_worker: tuple[int, ...],
        serve_worker: Callable[[str, Callable[[], None]], None],
    ) -> None:
        self.ready_w = ready_w
        self.close_in_worker = close_in_worker
        self.serve_worker = serve_worker
        self.supervisor = os.getpid()

    def fork(self, slot: _Slot) -> None:
        slot.ready = False
        slot.due = None
        slot.started = time.monotonic()
        pid = os.fork()
        if pid:
            slot.pid = pid
            return
        code = 1  # the worker: never returns into the supervisor's loop
        try:
            self._worker(slot)
            code = 0
        except BaseException:
            log.exception("proxy worker %d failed", slot.number)
        finally:
            logging.shutdown()
            os._exit(code)

    def _worker(self, slot: _Slot) -> None:
        signal.set_wakeup_fd(-1)
        for signum in _SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        for fd in self.close_in_worker:
            os.close(fd)
        _die_with_parent()
        if os.getppid() != self.supervisor:  # it died before the request above
            return
        ready_w = self.ready_w

        def ready() -> None:
            os.write(ready_w, f"{slot.number} {os.getpid()}\n".encode())

        self.serve_worker(slot.gateway_id, ready)


def _note(_signum: int, _frame: object) -> None:
    """The signals' handler: the wake-up fd carries the signal to the loop."""


def _reap() -> list[tuple[int, str]]:
    """(pid, how it ended) of every child that has ended."""
    ended: list[tuple[int, str]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        if os.WIFSIGNALED(status):
            how = f"signal {signal.Signals(os.WTERMSIG(status)).name}"
        else:
            how = f"status {os.waitstatus_to_exitcode(status)}"
        ended.append((pid, how))


def _kill(pid: int | None, signum: int) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _die_with_parent() -> None:
    """SIGTERM to this process when its parent dies (Linux); nothing elsewhere."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError, TypeError):
        return
    if prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG): %s", os.strerror(ctypes.get_errno() or errno.EINVAL))
