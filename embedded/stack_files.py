"""The embedded stack's files under FERRY_HOME/stack (embedded/stack.py has the whole list), the lock that
serialises its starts, stops and upgrades, and what its processes' files say of them (`status`).
Light to import: no Temporal SDK."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from core.temporal_connection import without_security
from embedded.devserver import port_open
from embedded.processes import listens_on, pid_alive, private_dir, private_opener
from embedded.stack_state import AgentFile, ProcessStatus, StackState, StackStatus


def ready_pid(ready_file: Path) -> int | None:
    """The pid a process wrote to its ready file once it served, if any."""
    try:
        return int(ready_file.read_text())
    except (OSError, ValueError):
        return None


def proxy_url(port: int) -> str:
    """The loopback URL of the stack's process on `port` (the proxy's, the API's)."""
    return f"http://127.0.0.1:{port}"


class StackFiles:
    """The files of the embedded stack of one FERRY_HOME, and what they say of its processes."""

    def __init__(self, home: Path, env: dict[str, str] | None = None) -> None:
        self.home = home
        self.dir = home / "stack"
        self._log_starts: dict[str, int] = {}  # by process name: its log's size when it was last spawned
        # The stack is plain TCP on loopback: TEMPORAL_TLS_* and TEMPORAL_API_KEY, for a remote server, are
        # not its processes' (docs/deployment.md#the-embedded-stack).
        self._env = without_security(os.environ if env is None else env)

    # --- files ------------------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.dir / "stack.json"

    @property
    def db_file(self) -> Path:
        return self.dir / "temporal.db"

    @property
    def ready_file(self) -> Path:
        return self.dir / "worker.ready"

    @property
    def proxy_ready_file(self) -> Path:
        return self.dir / "proxy.ready"

    @property
    def api_ready_file(self) -> Path:
        return self.dir / "api.ready"

    def log(self, name: str) -> Path:
        return self.home / "agent" / "agent.log" if name == "agent" else self.dir / f"{name}.log"

    def _read_state(self) -> StackState | None:
        try:
            return StackState.model_validate_json(self.state_file.read_text())
        except (OSError, ValueError):
            return None

    def _write_state(self, state: StackState) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)  # created anew, so private whatever mode a stale one had
        with open(tmp, "w", opener=private_opener) as out:
            out.write(state.model_dump_json(indent=2))
        tmp.replace(self.state_file)
        for name, pid in (
            ("temporal", state.temporal_pid),
            ("worker", state.worker_pid),
            ("proxy", state.proxy_pid),
            ("api", state.api_pid),
        ):
            pid_file = self.dir / f"{name}.pid"
            if pid is None:
                pid_file.unlink(missing_ok=True)
            else:
                with open(pid_file, "w", opener=private_opener) as out:
                    out.write(f"{pid}\n")

    def _agent(self) -> AgentFile | None:
        try:
            return AgentFile.model_validate_json((self.home / "agent" / "agent.json").read_text())
        except (OSError, ValueError):
            return None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        private_dir(self.home)
        private_dir(self.dir)
        with open(self.dir / "lock", "w", opener=private_opener) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    # What identifies each process in its command line, so a recycled pid is never taken for ours.
    def _temporal_marker(self) -> str:
        return str(self.db_file)

    def _worker_marker(self) -> str:
        return str(self.ready_file)

    def _proxy_marker(self) -> str:
        return str(self.proxy_ready_file)

    def _api_marker(self) -> str:
        return str(self.api_ready_file)

    def _agent_marker(self) -> str:
        return str(self.home / "agent" / "token")

    # --- state ------------------------------------------------------------------------------------

    def _temporal_up(self, state: StackState | None) -> bool:
        return (
            state is not None
            and pid_alive(state.temporal_pid, self._temporal_marker())
            and port_open(state.port)
        )

    def _worker_up(self, state: StackState | None) -> bool:
        if state is None or not pid_alive(state.worker_pid, self._worker_marker()):
            return False
        return ready_pid(self.ready_file) == state.worker_pid

    def _proxy_up(self, state: StackState | None) -> bool:
        if state is None or not pid_alive(state.proxy_pid, self._proxy_marker()):
            return False
        return ready_pid(self.proxy_ready_file) == state.proxy_pid

    def _api_up(self, state: StackState | None) -> bool:
        """Alive, and listening on its port itself (another stack's process may have won the port)."""
        if state is None or state.api_port is None or state.api_pid is None:
            return False
        if not pid_alive(state.api_pid, self._api_marker()):
            return False
        return ready_pid(self.api_ready_file) == state.api_pid and listens_on(state.api_pid, state.api_port)

    def status(self) -> StackStatus:
        state = self._read_state()
        agent = self._agent()
        temporal_up = self._temporal_up(state)
        processes = [
            ProcessStatus(
                name="temporal",
                pid=state.temporal_pid if state else None,
                alive=temporal_up,
                address=f"127.0.0.1:{state.port}" if state else None,
                log=str(self.log("temporal")),
            ),
            ProcessStatus(
                name="worker",
                pid=state.worker_pid if state else None,
                alive=self._worker_up(state),
                log=str(self.log("worker")),
            ),
            ProcessStatus(
                name="proxy",
                pid=state.proxy_pid if state else None,
                alive=self._proxy_up(state),
                address=proxy_url(state.proxy_port) if state and state.proxy_port else None,
                log=str(self.log("proxy")),
            ),
            ProcessStatus(
                name="api",
                pid=state.api_pid if state else None,
                alive=self._api_up(state),
                address=proxy_url(state.api_port) if state and state.api_port else None,
                log=str(self.log("api")),
            ),
            ProcessStatus(
                name="agent",
                pid=agent.pid if agent else None,
                alive=agent is not None and pid_alive(agent.pid, self._agent_marker()),
                address=agent.url if agent else None,
                log=str(self.log("agent")),
            ),
        ]
        return StackStatus(
            home=str(self.home),
            # A stack started by a Ferry before the API has none until it is upgraded or started again.
            running=all(
                p.alive for p in processes if p.name != "api" or (state and state.api_port is not None)
            ),
            address=f"127.0.0.1:{state.port}" if state and temporal_up else None,
            ui_url=f"http://127.0.0.1:{state.ui_port}" if state and temporal_up else None,
            metrics_url=(
                f"http://127.0.0.1:{state.metrics_port}/metrics"
                if state and temporal_up and state.metrics_port is not None
                else None
            ),
            processes=processes,
        )

    def is_running(self) -> bool:
        return self.status().running
