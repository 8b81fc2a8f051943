"""The local agent killed (SIGKILL) under running jobs of the embedded stack: the worker finds the agent it
starts again, its jobs finish as their processes do, and later runs run; `ferry server` in the foreground
starts a killed agent again rather than stopping (docs/jobs.md#a-restarted-agent)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from embedded.local_agent import ensure_local_agent, locate_local_agent, stop_local_agent
from embedded.processes import pid_alive
from embedded.stack import Stack
from tests.e2e.conftest import Ferry, ferry_env, task

WAIT = "120s"  # generous: each wait ends as soon as its run has
LIMIT = 120.0


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("configs")


def agent_of(ferry: Ferry) -> dict[str, Any]:
    """FERRY_HOME/agent/agent.json: where the local agent listens, and its pid."""
    return dict(json.loads((ferry.home / "agent" / "agent.json").read_text()))


def until(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + LIMIT
    while not condition():
        assert time.monotonic() < deadline, f"waited {LIMIT:.0f}s for {what}"
        time.sleep(0.05)


def _bound(sock: socket.socket, port: int | None) -> bool:
    try:
        sock.bind(("127.0.0.1", port or 0))
    except OSError:
        return False
    return True


@contextlib.contextmanager
def nobody_starts_the_agent(ferry: Ferry) -> Iterator[None]:
    """Holds the lock every starter of the local agent takes (embedded.local_agent.ensure_local_agent)."""
    with open(ferry.home / "agent" / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def kill_agent(ferry: Ferry) -> dict[str, Any]:
    """SIGKILL the local agent; what agent.json said of it."""
    agent = agent_of(ferry)
    marker = str(ferry.home / "agent" / "token")
    assert pid_alive(agent["pid"], marker)
    os.kill(agent["pid"], signal.SIGKILL)
    until("the agent to die", lambda: not pid_alive(agent["pid"], marker))
    return agent


def running_with_log(ferry: Ferry, name: str, log: str) -> dict[str, Any]:
    """Once the run's job runs and has logged `log`: the job as `ferry ps --json` shows it."""
    assert ferry("wait", name, "--event", "start", "--timeout", WAIT, timeout=LIMIT).returncode == 0
    until(f"{name} to log {log!r}", lambda: ferry("logs", name).stdout == log)
    [run] = [r for r in json.loads(ferry("ps", "--json").stdout) if r["name"] == name]
    [job] = run["jobs"]
    return dict(job)


def finished_job(ferry: Ferry, name: str) -> dict[str, Any]:
    ferry("wait", name, "--timeout", WAIT, timeout=LIMIT)
    [run] = [r for r in json.loads(ferry("ps", "-a", "--json").stdout) if r["name"] == name]
    [job] = run["jobs"]
    return {"run_status": run["status"], **job}


def test_a_job_runs_on_through_an_agent_restart_on_another_port(ferry: Ferry, configs: Path) -> None:
    go = configs / "go-on"
    conf = task(
        configs, "survivor", "echo started", f"while [ ! -f {go} ]; do sleep 0.05; done", "echo finished"
    )
    assert ferry("apply", "-y", "-d", "-f", conf).returncode == 0
    running_with_log(ferry, "survivor", "started\n")

    with nobody_starts_the_agent(ferry):
        killed = kill_agent(ferry)
        # Its port taken meanwhile: the agent started again listens on another, which the worker must find.
        squatter = socket.socket()
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the old connections' TIME_WAIT
        # The dead agent's side of a connection the worker has not closed yet (FIN_WAIT_2) still holds the
        # port for a moment: bind once the worker's client has let go of it.
        until("the killed agent's port to be free", lambda: _bound(squatter, urlsplit(killed["url"]).port))
        squatter.listen()
    with squatter:
        # No `ferry` command runs until the worker has started the agent again itself.
        until("the worker to start the agent again", lambda: agent_of(ferry)["pid"] != killed["pid"])
        assert agent_of(ferry)["url"] != killed["url"]
        go.touch()
        job = finished_job(ferry, "survivor")
    assert (job["run_status"], job["status"], job["exit_status"]) == ("done", "done", 0)
    assert ferry("logs", "survivor").stdout == "started\nfinished\n"

    after = ferry("apply", "-y", "-f", task(configs, "after-restart", "echo still here"), timeout=LIMIT)
    assert (after.returncode, after.stdout) == (0, "still here\n"), after.stderr


def test_a_job_that_ends_while_the_agent_is_down_fails_with_its_exit_status(
    ferry: Ferry, configs: Path
) -> None:
    go = configs / "go-down"
    commands = ("echo started", f"while [ ! -f {go} ]; do sleep 0.05; done", "echo ending", "exit 7")
    assert ferry("apply", "-y", "-d", "-f", task(configs, "ends-alone", *commands)).returncode == 0
    job = running_with_log(ferry, "ends-alone", "started\n")
    exit_status = ferry.home / "agent" / "data" / "tasks" / job["id"] / "exit_status"

    with nobody_starts_the_agent(ferry):
        killed = kill_agent(ferry)
        go.touch()
        until("the job to end while its agent is down", exit_status.exists)
    # The agent started again (on the port it had, now free) finds the job ended, with its exit status.
    job = finished_job(ferry, "ends-alone")
    assert agent_of(ferry)["url"] == killed["url"]
    assert (job["run_status"], job["status"], job["exit_status"]) == ("failed", "failed", 7)
    assert job["termination_reason"] == "container_exited_with_error"
    assert ferry("logs", "ends-alone").stdout == "started\nending\n"


def test_the_foreground_server_starts_a_killed_agent_again(tmp_path: Path) -> None:
    ferry = Ferry(tmp_path, ferry_env(tmp_path))
    server = ferry.popen("server")
    stack = Stack(tmp_path)
    try:
        until("the stack to start", lambda: server.poll() is None and stack.is_running())
        killed = kill_agent(ferry)
        # No job asks for the agent: the server starts it again, and goes on.
        until("the agent to be started again", lambda: agent_of(ferry)["pid"] != killed["pid"])
        until("the stack to run whole again", stack.is_running)
        assert server.poll() is None
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=LIMIT)
    finally:
        if server.poll() is None:
            server.kill()
            stack.stop()
    assert server.returncode == 0, err
    assert "ferry server: the agent exited" in err and "starting it again" in err
    assert out.endswith("stopped: api, proxy, worker, temporal, agent\n")


def test_a_live_agent_is_never_doubled_and_a_dead_one_comes_back_on_its_port(tmp_path: Path) -> None:
    agent = ensure_local_agent(tmp_path)
    try:
        os.kill(agent.pid, signal.SIGSTOP)  # alive, answering nothing
        with pytest.raises(RuntimeError, match=rf"the local agent \(pid {agent.pid}\) does not answer"):
            ensure_local_agent(tmp_path, startup_timeout=1)
        assert locate_local_agent(tmp_path) == agent  # a client that failed keeps it: no second agent
        os.kill(agent.pid, signal.SIGCONT)
        os.kill(agent.pid, signal.SIGKILL)
        until("the agent to die", lambda: not pid_alive(agent.pid, str(tmp_path / "agent" / "token")))
        again = locate_local_agent(tmp_path)
        assert again.pid != agent.pid and (again.url, again.token) == (agent.url, agent.token)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(agent.pid, signal.SIGCONT)
        stop_local_agent(tmp_path)
