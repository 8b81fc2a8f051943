"""The embedded stack: a Temporal dev server, one worker, the services proxy, Ferry's API and the local
agent, under FERRY_HOME/stack.

`ensure_stack` is what every command that needs Temporal calls when no FERRY_TEMPORAL_ADDRESS is set:
it starts whatever part of the stack is not running (in the background, detached, so that it outlives
the command) and returns the dev server's address. `ferry server` runs the same stack in the foreground.

Files under FERRY_HOME/stack: stack.json (ports and pids), temporal.pid, worker.pid, proxy.pid, api.pid,
worker.ready, proxy.ready and api.ready (each the process's pid, written once it polls or listens),
temporal.db (the dev server's SQLite), *.log. The agent keeps its own files under FERRY_HOME/agent
(embedded.local_agent); one that died is started again by the next `start`, or by the worker as soon as it
needs it, and its jobs go on (docs/jobs.md#a-restarted-agent). Everything under FERRY_HOME is private to the
user (directories 0700, files 0600): checked, and fixed where it is not, whenever the stack is started.
Light to import: no Temporal SDK at module level.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from core.settings import Settings
from core.temporal_connection import temporal_namespace
from embedded.devserver import dev_server_command
from embedded.processes import (
    PRIVATE_UMASK,
    STOP_TIMEOUT,
    NotPrivate,
    free_port,
    job_code,
    listens_on,
    make_private,
    pid_alive,
    port_free,
    private_opener,
    terminate,
)
from embedded.stack_files import StackFiles, proxy_url, ready_pid
from embedded.stack_state import ProcessStatus, StackState, StackStatus

__all__ = [
    "ProcessStatus",
    "Stack",
    "StackError",
    "StackStatus",
    "ensure_stack",
    "pid_alive",
    "worker_command",
]

DEFAULT_PORT = 7233
DEFAULT_UI_PORT = 8233
DEFAULT_PROXY_PORT = 8300  # the services proxy (gateway/): http://127.0.0.1:8300/proxy/services/...
DEFAULT_API_PORT = 8400  # Ferry's API (api/, docs/teams.md): http://127.0.0.1:8400/api/...
START_TIMEOUT = 60.0
PORT_ATTEMPTS = 3  # starts of a process whose free port another took before it could bind it
# An upgraded worker's graceful shutdown (worker.main: 5 s at most for activities other than the watches,
# which hand over at once: activities/handover.py), and a margin to exit.
DRAIN_TIMEOUT = 30.0


class StackError(RuntimeError):
    """The stack could not be started; the message says which part and where its log is."""


class PortTaken(StackError):
    """A process of the stack exited because another took a port chosen for it, or by it (free when
    chosen): it is started again."""


class StackNotRunning(StackError):
    """An upgrade asked of a stack that is not running."""


def worker_command(ready_file: Path) -> list[str]:
    """A stack worker's command; it writes its pid to `ready_file` once it polls."""
    return [sys.executable, "-m", "worker.stack_entry", "--ready-file", str(ready_file)]


class Stack(StackFiles):
    """The embedded stack of one FERRY_HOME: started, stopped and upgraded."""

    # --- start and stop ---------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT) -> StackStatus:
        """Start whatever part of the stack is not running; idempotent, and safe to call concurrently. A
        process whose port another took meanwhile (another stack starting at the same moment, say) is
        started again on another."""
        for _ in range(PORT_ATTEMPTS - 1):
            with contextlib.suppress(PortTaken):
                return self._start_once(timeout)
        return self._start_once(timeout)

    def _start_once(self, timeout: float) -> StackStatus:
        with self._locked():
            self.make_private()
            state = self._read_state()
            temporal: subprocess.Popen[bytes] | None = None
            worker: subprocess.Popen[bytes] | None = None
            proxy: subprocess.Popen[bytes] | None = None
            api: subprocess.Popen[bytes] | None = None
            if not self._temporal_up(state):
                if state is not None:
                    terminate(state.temporal_pid, self._temporal_marker())  # alive without its port
                moved = StackState(
                    port=self._choose_port(state.port if state else None, DEFAULT_PORT),
                    ui_port=self._choose_port(state.ui_port if state else None, DEFAULT_UI_PORT),
                    proxy_port=state.proxy_port if state else None,
                    worker_pid=state.worker_pid if state else None,
                    proxy_pid=state.proxy_pid if state else None,
                    api_port=state.api_port if state else None,
                    api_pid=state.api_pid if state else None,
                    metrics_port=self._choose_port(state.metrics_port if state else None, None),
                )
                if state is not None and moved.port != state.port:
                    # Its port was taken while it was down: the worker, the proxy and the API know it by its
                    # old address, where another stack's server may listen now; they start again with the new.
                    terminate(state.worker_pid, self._worker_marker())
                    terminate(state.proxy_pid, self._proxy_marker())
                    terminate(state.api_pid, self._api_marker())
                state = moved
                temporal = self._spawn("temporal", self._temporal_command(state))
                state.temporal_pid = temporal.pid
            assert state is not None
            api_down = not self._api_up(state)
            if api_down:  # its port first: the worker tells jobs where the API is (FERRY_JOB_API_URL)
                terminate(state.api_pid, self._api_marker())  # alive but never ready
                state.api_port = self._choose_port(state.api_port, DEFAULT_API_PORT)
            if not self._worker_up(state):
                terminate(state.worker_pid, self._worker_marker())  # alive but never ready
                self.ready_file.unlink(missing_ok=True)
                worker = self._spawn("worker", self._worker_command(state), env=self._worker_env(state))
                state.worker_pid = worker.pid
            if not self._proxy_up(state):
                terminate(state.proxy_pid, self._proxy_marker())  # alive but never ready
                state.proxy_port = self._choose_port(state.proxy_port, DEFAULT_PROXY_PORT)
                proxy = self._spawn_proxy(state)
            if api_down:
                api = self._spawn_api(state)
            self._write_state(state)
            agent = self._agent()
            if agent is None or not pid_alive(agent.pid, self._agent_marker()):
                self._start_agent(timeout)  # while the worker imports; the worker then finds it running
            deadline = time.monotonic() + timeout
            if temporal is not None:
                ports = (state.port, state.ui_port, state.metrics_port)
                # Its own listener, not merely an open port: another stack's may have won the port.
                pid = temporal.pid
                self._wait("temporal", temporal, lambda: listens_on(pid, state.port), deadline, ports)
            if worker is not None:
                self._wait("worker", worker, lambda: self._worker_up(state), deadline)
            if proxy is not None:
                self._wait("proxy", proxy, lambda: self._proxy_up(state), deadline, (state.proxy_port,))
            if api is not None:
                self._wait("api", api, lambda: self._api_up(state), deadline, (state.api_port,))
        return self.status()

    def stop(self, timeout: float = STOP_TIMEOUT) -> list[str]:
        """Stop the API, the proxy and the worker, then the dev server, then the agent; the names of those
        that were running."""
        stopped: list[str] = []
        with self._locked():
            state = self._read_state()
            if state is not None:
                if terminate(state.api_pid, self._api_marker(), timeout):
                    stopped.append("api")
                if terminate(state.proxy_pid, self._proxy_marker(), timeout):
                    stopped.append("proxy")
                if terminate(state.worker_pid, self._worker_marker(), timeout):
                    stopped.append("worker")
                if terminate(state.temporal_pid, self._temporal_marker(), timeout):
                    stopped.append("temporal")
                stopped_pids = {"temporal_pid": None, "worker_pid": None, "proxy_pid": None, "api_pid": None}
                self._write_state(state.model_copy(update=stopped_pids))
            self.ready_file.unlink(missing_ok=True)
            self.proxy_ready_file.unlink(missing_ok=True)
            self.api_ready_file.unlink(missing_ok=True)
            agent = self._agent()
            if agent is not None:
                if terminate(agent.pid, self._agent_marker(), timeout):
                    stopped.append("agent")
                (self.home / "agent" / "agent.json").unlink(missing_ok=True)
        return stopped

    def upgrade(self, timeout: float = START_TIMEOUT, say: Callable[[str], object] = print) -> StackStatus:
        """Replace the running stack's worker, agent, proxy and API with processes of the calling code,
        leaving the dev server and the runs' jobs as they are (docs/upgrades.md#upgrading-the-embedded-stack).
        The new worker polls before the old one is sent SIGTERM, so no workflow or activity task waits for a
        worker; the old one's activities still running after its graceful shutdown are retried on the new
        one. The agent's jobs outlive it, and the new agent re-adopts them (docs/jobs.md#a-restarted-agent).
        The proxy is stopped (gracefully: its requests in flight finish) before the new one takes its port."""
        not_running = StackNotRunning(f"the stack of {self.home} is not running: `ferry server start` it")
        if not self.status().running:  # before the lock, which would make FERRY_HOME/stack
            raise not_running
        with self._locked():
            state = self._read_state()
            if state is None or not self.status().running:
                raise not_running
            deadline = time.monotonic() + timeout
            began = time.monotonic()

            def took() -> str:
                nonlocal began
                seconds, began = time.monotonic() - began, time.monotonic()
                return f"{seconds:.1f} s"

            old_worker = state.worker_pid
            worker = self._spawn("worker", self._worker_command(state), env=self._worker_env(state))
            self._wait("worker", worker, lambda: ready_pid(self.ready_file) == worker.pid, deadline)
            state.worker_pid = worker.pid
            self._write_state(state)
            terminate(old_worker, self._worker_marker(), DRAIN_TIMEOUT)
            say(f"worker: pid {old_worker} replaced by pid {worker.pid} ({took()})")

            old_agent = self._agent()
            if old_agent is not None:
                terminate(old_agent.pid, self._agent_marker())
            agent_pid = self._start_agent(timeout)
            say(f"agent: pid {old_agent.pid if old_agent else '-'} replaced by pid {agent_pid} ({took()})")

            old_proxy = state.proxy_pid
            terminate(old_proxy, self._proxy_marker())
            proxy = self._spawn_proxy(state)
            self._write_state(state)
            self._wait("proxy", proxy, lambda: self._proxy_up(state), deadline, (state.proxy_port,))
            say(f"proxy: pid {old_proxy} replaced by pid {proxy.pid} ({took()})")

            old_api = state.api_pid
            terminate(old_api, self._api_marker())
            if state.api_port is None:  # a stack of a Ferry before the API
                state.api_port = self._choose_port(None, DEFAULT_API_PORT)
            api = self._spawn_api(state)
            self._write_state(state)
            self._wait("api", api, lambda: self._api_up(state), deadline, (state.api_port,))
            say(f"api: pid {old_api or '-'} replaced by pid {api.pid} ({took()})")
        return self.status()

    def _spawn_proxy(self, state: StackState) -> subprocess.Popen[bytes]:
        """A new proxy on `state.proxy_port`, its pid in `state` (the caller has stopped the old one)."""
        self.proxy_ready_file.unlink(missing_ok=True)
        proxy = self._spawn("proxy", self._proxy_command(state), env=self._worker_env(state))
        state.proxy_pid = proxy.pid
        return proxy

    def _spawn_api(self, state: StackState) -> subprocess.Popen[bytes]:
        """A new API on `state.api_port` over the stack's store, its pid in `state`."""
        assert state.api_port is not None
        self.api_ready_file.unlink(missing_ok=True)
        command = [sys.executable, "-m", "api", "serve", "--port", str(state.api_port), "--embedded"]
        api = self._spawn(
            "api", [*command, "--ready-file", str(self.api_ready_file)], env=self._worker_env(state)
        )
        state.api_pid = api.pid
        return api

    def _start_agent(self, timeout: float) -> int:
        """The local agent, started if none runs (embedded.local_agent); its pid."""
        from embedded.local_agent import ensure_local_agent

        try:
            return ensure_local_agent(self.home, startup_timeout=timeout).pid
        except RuntimeError as err:
            raise StackError(str(err)) from None

    def settled_status(self) -> StackStatus:
        """status(), once no start, stop or upgrade is under way (during an upgrade two workers run)."""
        with self._locked():
            return self.status()

    def make_private(self) -> None:
        """FERRY_HOME's directories 0700 and files 0600, each change said on stderr (the next start finds
        nothing to say); StackError if a wide file is another user's."""
        try:
            changes = make_private(self.home, skip=job_code)
        except NotPrivate as err:
            raise StackError(str(err)) from None
        for change in changes:
            print(f"ferry: {change}", file=sys.stderr, flush=True)

    def _choose_port(self, recorded: int | None, default: int | None) -> int:
        """The port this home used before, else the default, else any free one."""
        for candidate in (recorded, default):
            if candidate is not None and port_free(candidate):
                return candidate
        return free_port()

    def _temporal_command(self, state: StackState) -> list[str]:
        return dev_server_command(
            port=state.port, ui_port=state.ui_port, db_file=self.db_file, metrics_port=state.metrics_port
        )

    def _worker_command(self, state: StackState) -> list[str]:
        return worker_command(self.ready_file)

    def worker_env(self) -> dict[str, str]:
        """The environment of this running stack's worker, for another beside it (embedded.extra_workers)."""
        state = self._read_state()
        assert state is not None, f"no stack runs in {self.home}"
        return self._worker_env(state)

    def _proxy_command(self, state: StackState) -> list[str]:
        assert state.proxy_port is not None
        return [
            sys.executable,
            "-m",
            "gateway",
            "--host",
            "127.0.0.1",
            "--port",
            str(state.proxy_port),
            "--public-url",
            proxy_url(state.proxy_port),
            "--ready-file",
            str(self.proxy_ready_file),
        ]

    def _worker_env(self, state: StackState) -> dict[str, str]:
        env = dict(self._env)
        env["FERRY_HOME"] = str(self.home)
        env["FERRY_TEMPORAL_ADDRESS"] = f"127.0.0.1:{state.port}"
        env["FERRY_TEMPORAL_NAMESPACE"] = temporal_namespace(env)  # the one the commands use
        if state.api_port is not None:  # where a job with `dstack: true` reaches the API (docs/teams.md)
            env.setdefault("FERRY_JOB_API_URL", f"http://127.0.0.1:{state.api_port}")
        return env

    def _spawn(
        self, name: str, command: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        # The child keeps its own copy of the descriptor.
        with open(self.log(name), "ab", opener=private_opener) as log:
            self._log_starts[name] = log.tell()  # where this start's lines begin (`_bind_refused`)
            return subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # outlives the command, and Ctrl-C in its terminal
                env=env if env is not None else self._env,
                cwd=self.dir,
                umask=PRIVATE_UMASK,  # temporal.db, ferry.db and their -wal/-shm: private from the start
            )

    def _wait(
        self,
        name: str,
        proc: subprocess.Popen[bytes],
        ready: Callable[[], bool],
        deadline: float,
        ports: tuple[int | None, ...] = (),
    ) -> None:
        """Until `ready()`; PortTaken if the process exited and one of its `ports` is someone else's now."""
        while not ready():
            if proc.poll() is not None:
                failure = f"the {name} exited with status {proc.returncode}{self._last_words(name)}"
                taken = any(port is not None and not port_free(port) for port in ports)
                taken = taken or self._bind_refused(name)
                raise PortTaken(failure) if taken else StackError(failure)
            if time.monotonic() > deadline:
                raise StackError(f"the {name} did not start in time; see {self.log(name)}")
            time.sleep(0.02)

    def _bind_refused(self, name: str) -> bool:
        """Whether the process's log since its start says a port it bound was taken: the dev server
        chooses its internal services' ports itself, and another process may take one before it binds it
        (it then panics: `Failed to start gRPC listener ... address already in use`)."""
        try:
            with open(self.log(name), "rb") as log:
                log.seek(self._log_starts.get(name, 0))
                return b"address already in use" in log.read()
        except OSError:
            return False

    def _last_words(self, name: str) -> str:
        """`: <its last log line> (see <log>)`, for an error message."""
        try:
            lines = [line for line in self.log(name).read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            lines = []
        last = f": {lines[-1].strip()[:200]}" if lines else ""
        return f"{last} (see {self.log(name)})"


def ensure_stack(settings: Settings) -> str:
    """The Temporal address to use: FERRY_TEMPORAL_ADDRESS if set, else the embedded stack's (started if
    it is not running)."""
    if settings.temporal_address is not None:
        return settings.temporal_address
    status = Stack(settings.home).start()
    assert status.address is not None
    return status.address
