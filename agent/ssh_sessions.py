"""The sessions of the agent's SSH server: commands, shells and files, as part of a running job.

A session's command runs as the job runs (agent/executors: `Executor.job_context`): the job's environment,
its working directory, its network namespace, the agent's user. It runs in the user's login shell (`shell
-c command`, or the shell alone, interactive), in a session and process group of its own, so that a
lost connection hangs its group up (SIGHUP, as sshd's closing terminal does) and the task's end kills it.

With a terminal asked for, the shell gets a pseudo-terminal as its controlling terminal: the child starts a
new session and opens the terminal by name, which makes it the session's (Linux gives a session leader
the first terminal it opens), with no code run between fork and exec.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import posixpath
import pwd
import signal
import struct
import termios
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from agent.executors import JobContext
from agent.records import load_job_spec
from agent.tasks import TaskNotFound, TaskRegistry
from core.wire.agent_api import TaskStatus

logger = logging.getLogger(__name__)

CHUNK = 64 * 1024
PTY_DRAIN = 2.0  # seconds: what a shell's background jobs still write to its terminal once it has exited
CLIENT_ENV = ("LANG", "LC_")  # what a client may set (ssh's SendEnv/SetEnv), as sshd's usual AcceptEnv
# $1: the terminal; then the command. Opening the terminal makes it the controlling one (see above).
TERMINAL_SCRIPT = 'tty=$1; shift; exec 0<>"$tty" 1>&0 2>&0; exec "$@"'
_STREAM_ERRORS = (OSError, asyncssh.Error)


class SessionRefused(Exception):
    pass


def login_shell() -> str:
    """The agent user's login shell when it is a usable one, else bash, else sh."""
    with contextlib.suppress(KeyError):
        shell = pwd.getpwuid(os.getuid()).pw_shell
        if shell and os.access(shell, os.X_OK) and not shell.endswith(("nologin", "false")):
            return shell
    return "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"


@dataclass(frozen=True)
class _Command:
    """A session's command, about to start as part of its task's job."""

    process: asyncssh.SSHServerProcess[bytes]
    task_id: str
    context: JobContext
    argv: list[str]
    env: dict[str, str]

    async def start(self, *wrapper: str, **stdio: Any) -> asyncio.subprocess.Process:
        """The command as the job runs (its prefix, directory and environment), after `wrapper`, in a
        session of its own; `stdio` gives its standard streams."""
        return await asyncio.create_subprocess_exec(
            *self.context.prefix,
            *wrapper,
            *self.argv,
            cwd=self.context.cwd,
            env=self.env,
            start_new_session=True,
            **stdio,
        )


class JobSessions:
    """The sessions into the jobs of one registry, and the process groups they started, per task."""

    def __init__(self, registry: TaskRegistry) -> None:
        self.registry = registry
        self._groups: dict[str, set[int]] = {}
        self._waits: set[asyncio.Future[int]] = set()  # for each child, until it exits
        self._open: dict[str, set[asyncssh.SSHServerProcess[bytes]]] = {}  # sessions running a command

    def context(self, task_id: str) -> JobContext:
        try:
            record = self.registry.get(task_id)
        except TaskNotFound:
            raise SessionRefused(f"task {task_id!r} is gone") from None
        if record.status != TaskStatus.RUNNING:
            raise SessionRefused(f"task {task_id!r} is {record.status}: its job is not running")
        paths = self.registry.paths(task_id)
        executor = self.registry.executors.for_task(record)
        try:
            return executor.job_context(record, paths, load_job_spec(paths), bool(self.registry.gpus))
        except (OSError, ValueError) as exc:
            raise SessionRefused(f"task {task_id!r}: cannot join its job: {exc}") from exc

    def kill(self, task_id: str, reason: str) -> None:
        """SIGKILL what the task's sessions started: the job has ended, and they were part of it. Each
        session is told why first: its client may stop at the session's close and never read the
        connection's own disconnect message."""
        for process in self._open.pop(task_id, set()):
            with contextlib.suppress(*_STREAM_ERRORS):
                process.stderr.write(f"\r\nferry-agent: {reason}\r\n".encode())
        for group in self._groups.pop(task_id, set()):
            _signal_group(group, signal.SIGKILL)

    def sftp_server(self, chan: asyncssh.SSHServerChannel[bytes]) -> asyncssh.SFTPServer:
        task_id = chan.get_connection().get_extra_info("username")
        try:
            context = self.context(task_id)
        except SessionRefused as exc:
            logger.warning("SFTP session refused: %s", exc)
            raise
        return JobSFTPServer(chan, context.cwd)

    async def run(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        """A session's shell or command, until it exits; its exit status goes back to the client."""
        task_id = process.get_extra_info("username")
        try:
            if process.subsystem:
                raise SessionRefused(f"no subsystem {process.subsystem!r}: only sftp")
            context = self.context(task_id)
        except SessionRefused as exc:
            logger.warning("SSH session into %s refused: %s", task_id, exc)
            process.stderr.write(f"ferry-agent: {exc}\r\n".encode())
            process.exit(1)
            return
        shell = login_shell()
        argv = [shell] if process.command is None else [shell, "-c", process.command]
        # PWD as a login shell would find it: the agent's own (the job inherits it) names another directory.
        env = {**context.env, **_session_env(process, shell), "PWD": str(context.cwd)}
        env.pop("OLDPWD", None)
        run = self._run_in_terminal if process.term_type else self._run_piped
        try:
            returncode = await run(_Command(process, task_id, context, argv, env))
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the command or the environment
            logger.warning("SSH session into %s could not start: %s", task_id, exc)
            process.stderr.write(f"ferry-agent: cannot start {shell}: {exc}\r\n".encode())
            process.exit(127)
            return
        if returncode is None:
            return  # the connection went first: nobody to tell
        if returncode < 0:
            process.exit_with_signal(signal.Signals(-returncode).name.removeprefix("SIG"))
        else:
            process.exit(returncode)

    async def _run_piped(self, command: _Command) -> int | None:
        process = command.process
        child = await command.start(
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        stdin = child.stdin

        async def write(data: bytes) -> None:
            stdin.write(data)
            await stdin.drain()

        def eof() -> None:
            with contextlib.suppress(OSError):
                stdin.close()

        outputs = [
            _pump_stream(child.stdout.read, process.stdout),
            _pump_stream(child.stderr.read, process.stderr),
        ]
        return await self._supervise(process, command.task_id, child, outputs, write, eof, None)

    async def _run_in_terminal(self, command: _Command) -> int | None:
        process = command.process
        master, slave = os.openpty()
        try:
            _set_window(master, process.term_size)
            os.set_blocking(master, False)
            wrapper = ["/bin/sh", "-c", TERMINAL_SCRIPT, "ferry-ssh", os.ttyname(slave)]
            child = await command.start(*wrapper, stdin=slave, stdout=slave, stderr=slave)
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)  # the child holds it: the master reads EIO once the child's side is all closed
        try:
            output = [_pump_stream(lambda size: _read_fd(master, size), process.stdout)]
            return await self._supervise(
                process, command.task_id, child, output, lambda data: _write_fd(master, data), None, master
            )
        finally:
            os.close(master)

    async def _supervise(
        self,
        process: asyncssh.SSHServerProcess[bytes],
        task_id: str,
        child: asyncio.subprocess.Process,
        outputs: Sequence[Awaitable[None]],
        write: Callable[[bytes], Awaitable[None]],
        eof: Callable[[], None] | None,
        terminal: int | None,
    ) -> int | None:
        """Feed the child the client's input and send back its output until it exits; hang its group up
        if the connection goes first. Its exit status, or None when the connection went first."""
        group = child.pid  # start_new_session: it leads its own session and process group
        groups = self._groups.setdefault(task_id, set())
        groups.add(group)
        # The group is the task's until its leader exits, even if the session ends first (a child that
        # ignores SIGHUP lives on, as under sshd, and dies with the job).
        exiting = asyncio.ensure_future(child.wait())
        self._waits.add(exiting)

        def exited(_: object) -> None:
            groups.discard(group)
            self._waits.discard(exiting)

        exiting.add_done_callback(exited)
        sending: asyncio.Future[Any] = asyncio.gather(*outputs)
        feeding: asyncio.Future[Any] = asyncio.ensure_future(_feed(process, group, write, eof, terminal))
        closing: asyncio.Future[Any] = asyncio.ensure_future(process.wait_closed())
        sessions = self._open.setdefault(task_id, set())
        sessions.add(process)
        try:
            await asyncio.wait({exiting, closing}, return_when=asyncio.FIRST_COMPLETED)
            if not exiting.done():
                _signal_group(group, signal.SIGHUP)
                return None
            # As sshd: a command is done once it has exited and its output is all sent. A terminal may
            # be held open by the shell's background jobs forever: what they wrote by then is sent.
            await asyncio.wait(
                {sending, closing},
                timeout=None if terminal is None else PTY_DRAIN,
                return_when=asyncio.FIRST_COMPLETED,
            )
            return None if closing.done() else child.returncode
        finally:
            sessions.discard(process)
            for pending in (sending, feeding, closing):
                pending.cancel()
            await asyncio.gather(sending, feeding, closing, return_exceptions=True)


def _session_env(process: asyncssh.SSHServerProcess[bytes], shell: str) -> dict[str, str]:
    """What an SSH session adds to the job's environment, as sshd would."""
    env = {
        name: value
        for name, value in process.env.items()
        if isinstance(name, str) and isinstance(value, str) and name.startswith(CLIENT_ENV)
    }
    peer = process.get_extra_info("peername") or ("", 0)
    sock = process.get_extra_info("sockname") or ("", 0)
    env["SSH_CONNECTION"] = f"{peer[0]} {peer[1]} {sock[0]} {sock[1]}"
    env["SSH_CLIENT"] = f"{peer[0]} {peer[1]} {sock[1]}"
    env["SHELL"] = shell
    if process.command is not None:
        env["SSH_ORIGINAL_COMMAND"] = process.command
    if process.term_type:
        env["TERM"] = process.term_type
    return env


async def _feed(
    process: asyncssh.SSHServerProcess[bytes],
    group: int,
    write: Callable[[bytes], Awaitable[None]],
    eof: Callable[[], None] | None,
    terminal: int | None,
) -> None:
    """The client's input to the child; its signals and window changes to the child's group and terminal."""
    while True:
        try:
            data = await process.stdin.read(CHUNK)
        except asyncssh.TerminalSizeChanged as change:
            if terminal is not None:
                _set_window(terminal, change.term_size)  # the kernel tells the foreground group (SIGWINCH)
            continue
        except asyncssh.SignalReceived as received:
            signum = getattr(signal, f"SIG{received.signal}", None)
            if isinstance(signum, signal.Signals):
                _signal_group(group, signum)
            continue
        except asyncssh.BreakReceived:
            _signal_group(group, signal.SIGINT)
            continue
        except _STREAM_ERRORS:
            return
        except Exception:  # another notice from the client (a soft EOF): nothing the child hears of
            continue
        if not data:
            break
        try:
            await write(data)
        except OSError:
            return  # the child no longer reads its input
    if eof is not None:
        eof()


async def _pump_stream(read: Callable[[int], Awaitable[bytes]], sink: asyncssh.SSHWriter[bytes]) -> None:
    while True:
        try:
            data = await read(CHUNK)
        except OSError:  # a terminal's master reads EIO once nothing holds its other side
            return
        if not data:
            return
        try:
            sink.write(data)
            await sink.drain()
        except _STREAM_ERRORS:
            return


async def _wait_fd(fd: int, for_writing: bool) -> None:
    """Until `fd` is readable (writable): the watch is taken off at once, so that a slow client (a full
    channel) does not keep waking the loop while its terminal has output waiting."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if for_writing:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        if for_writing:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


async def _read_fd(fd: int, size: int) -> bytes:
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            await _wait_fd(fd, for_writing=False)


async def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await _wait_fd(fd, for_writing=True)


def _set_window(terminal: int, size: tuple[int, int, int, int]) -> None:
    width, height, pixel_width, pixel_height = size
    if width and height:
        fcntl.ioctl(
            terminal, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, pixel_width, pixel_height)
        )


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


class JobSFTPServer(asyncssh.SFTPServer):
    """The files as the job sees them: the whole file system, relative paths from the job's working
    directory (where an SFTP client starts, and where `scp file task:` puts the file)."""

    def __init__(self, chan: asyncssh.SSHServerChannel[bytes], cwd: Path) -> None:
        super().__init__(chan)
        self._cwd = os.fsencode(cwd)

    def map_path(self, path: bytes) -> bytes:
        return posixpath.join(self._cwd, path)  # an absolute path replaces the working directory

    def exit(self) -> None:
        # As sshd's sftp-server exiting: scp over SFTP (OpenSSH 9's default) fails a copy whose session
        # ends with no exit status, though every byte arrived.
        self.channel.exit(0)
