"""agent/supervisor.py on the distribution's Python, as an SSH host runs it: a dead agent started again on its
port, a first start that fails reported rather than retried, SIGTERM passed on."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

SUPERVISOR = Path(__file__).resolve().parents[2] / "agent" / "supervisor.py"
DISTRIBUTION_PYTHON = "/usr/bin/python3"
# Stands in for the agent: listens on the port it is given, until killed.
LISTENER = (
    "import socket, sys, time; s = socket.create_server(('127.0.0.1', int(sys.argv[1]))); time.sleep(600)"
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _supervisor(port: int, state: Path) -> list[str]:
    """Its command line as an SSH host's deployment gives it, up to `--`."""
    return [DISTRIBUTION_PYTHON, "-I", "-S", str(SUPERVISOR), "--port", str(port), "--state-file", str(state)]


def _wait(probe: Callable[[], object], what: str, limit: float = 30.0) -> object:
    deadline = time.monotonic() + limit
    while True:
        found = probe()
        if found:
            return found
        assert time.monotonic() < deadline, f"waited {limit:.0f}s for {what}"
        time.sleep(0.05)


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, int]]:
    port, state = _free_port(), tmp_path / "supervisor.json"
    command = _supervisor(port, state)
    with open(tmp_path / "log", "wb") as log:
        proc = subprocess.Popen([*command, "--", DISTRIBUTION_PYTHON, "-c", LISTENER, str(port)], stderr=log)
    yield proc, state, port
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    agent = json.loads(state.read_text())["pid"] if state.exists() else 0
    with contextlib.suppress(ProcessLookupError):
        if agent:
            os.kill(agent, signal.SIGKILL)


def _ready(state: Path) -> dict[str, int] | None:
    try:
        found = json.loads(state.read_text())
    except (OSError, ValueError):
        return None
    return found if found["ready"] else None


def test_a_killed_agent_is_started_again_on_its_port_and_sigterm_stops_both(
    supervised: tuple[subprocess.Popen[bytes], Path, int],
) -> None:
    proc, state, port = supervised
    first = _wait(lambda: _ready(state), "the first start")
    assert isinstance(first, dict) and first["starts"] == 1
    os.kill(first["pid"], signal.SIGKILL)
    second = _wait(lambda: (s := _ready(state)) and s["pid"] != first["pid"] and s, "the second start")
    assert isinstance(second, dict) and second["starts"] == 2
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert not Path(f"/proc/{second['pid']}").exists() or _zombie(second["pid"])


def _zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_an_agent_that_never_listened_is_not_started_again(tmp_path: Path) -> None:
    port, state = _free_port(), tmp_path / "supervisor.json"
    command = _supervisor(port, state)
    done = subprocess.run(
        [*command, "--", "sh", "-c", "echo cannot import >&2; exit 3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3 and json.loads(state.read_text())["starts"] == 1
    said, supervisor_said = done.stderr.splitlines()
    assert said == "cannot import"
    assert supervisor_said.endswith(f"the agent exited (exit status 3) before it listened on port {port}")
