"""The local backend's agent: one per FERRY_HOME, started by whichever worker (or stack) needs it first.

Its address and token live under FERRY_HOME/agent; a lock file makes concurrent starters agree on one.
All of FERRY_HOME/agent is private to the user (embedded.processes.make_private), from the start.

An agent that died (a crash, an OOM kill, an upgrade) is started again by the next that needs it, on the
port it had when that port is free; the worker's client looks where the agent is after each connection
failure (`local_agent_client`), so its jobs' watches find the restarted agent, which re-adopts their tasks
(docs/jobs.md#a-restarted-agent).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel

from activities.agent_client import AgentAddress, AgentClient
from core.temporal_connection import without_security
from embedded import processes
from embedded.processes import (
    PRIVATE_FILE,
    PRIVATE_UMASK,
    job_code,
    make_private,
    private_dir,
    private_opener,
)
from embedded.processes import free_port as free_port  # the tests and the bench take it from here

_PORT_RELEASE = 1.0  # seconds a dead agent's port may take to be free again


class LocalAgent(BaseModel):
    url: str
    token: str
    pid: int


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/healthcheck", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _token(path: Path) -> str:
    if not path.exists():
        # O_EXCL: created here with mode 0600 (the umask cannot widen it), never readable by others.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def agent_data_dir(home: Path) -> Path:
    """The local agent's --data-dir: its tasks, and the named volumes' directories (docs/volumes.md)."""
    return (home / "agent" / "data").resolve()


def ensure_local_agent(home: Path, *, startup_timeout: float = 30.0) -> LocalAgent:
    """The running local agent, started (detached, so it outlives workers) if none runs."""
    base = home / "agent"
    private_dir(home)
    private_dir(base)
    with open(base / "lock", "w", opener=private_opener) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # NotPrivate (a RuntimeError) if a wide file is another user's; each fix said once on stderr.
        for change in make_private(base, skip=job_code):
            print(f"ferry: {change}", file=sys.stderr, flush=True)
        token = _token(base / "token")
        state_file, log = base / "agent.json", base / "agent.log"
        known = _recorded(state_file)
        if known is not None and processes.pid_alive(known.pid, _marker(home)):
            # Running: it answers, or will (busy, or still starting); a second agent on the same data dir
            # would take its tasks for its own.
            _wait_healthy(known, startup_timeout, f"the local agent (pid {known.pid}) does not answer", log)
            return known
        port = _port(known)
        command = [
            sys.executable,
            "-m",
            "agent.main",
            "--port",
            str(port),
            "--token-file",
            str(base / "token"),
        ]
        command += ["--data-dir", str(agent_data_dir(home)), "--log-level", "warning"]
        # The child keeps its own copy of the descriptor.
        with open(log, "ab", opener=private_opener) as out:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                umask=PRIVATE_UMASK,  # its tasks' records, specs (env) and logs: private from the start
                # Its jobs get its environment: never Ferry's payload key (docs/secrets.md), which a worker
                # that starts it again may hold, nor Temporal's API key and TLS settings (docs/deployment.md).
                env={
                    k: v
                    for k, v in without_security(os.environ).items()
                    if not k.startswith("FERRY_CODEC_KEY")
                },
            )
        agent = LocalAgent(url=f"http://127.0.0.1:{port}", token=token, pid=proc.pid)
        try:
            _wait_healthy(agent, startup_timeout, "the local agent did not start", log, proc)
        except RuntimeError:
            proc.kill()  # never left starting unrecorded: the next starter would start a second one
            proc.wait()
            raise
        tmp = state_file.with_name(state_file.name + ".tmp")
        tmp.unlink(missing_ok=True)
        with open(tmp, "w", opener=private_opener) as out:  # it holds the token
            out.write(agent.model_dump_json())
        tmp.replace(state_file)
        return agent


def locate_local_agent(home: Path) -> LocalAgent:
    """Where the local agent is now, for a client that could not reach it: the recorded one while its
    process lives (it may only be slow: no second agent), else a new one, started here."""
    known = _recorded(home / "agent" / "agent.json")
    if known is not None and processes.pid_alive(known.pid, _marker(home)):
        return known
    return ensure_local_agent(home)


def local_agent_client(home: Path, timeout: float) -> AgentClient:
    """A client of the local agent (started if none runs) that follows it when it is restarted."""
    agent = ensure_local_agent(home)

    async def relocate() -> AgentAddress:
        found = await asyncio.to_thread(locate_local_agent, home)
        return AgentAddress(found.url, found.token, incarnation=found.pid)

    return AgentClient(agent.url, agent.token, timeout=timeout, relocate=relocate)


def _recorded(state_file: Path) -> LocalAgent | None:
    try:
        return LocalAgent.model_validate_json(state_file.read_text())
    except (OSError, ValueError):
        return None


def _marker(home: Path) -> str:
    """What the agent's command line holds, so that a recycled pid is never taken for it (as the stack's)."""
    return str(home / "agent" / "token")


def _port(known: LocalAgent | None) -> int:
    """The port the agent had, when it is free (within a moment: a killed agent's sockets take that to go):
    clients that knew it find the new agent there."""
    port = urlsplit(known.url).port if known is not None else None
    if port is not None:
        deadline = time.monotonic() + _PORT_RELEASE
        while not processes.port_free(port):
            if time.monotonic() > deadline:
                return free_port()
            time.sleep(0.05)
        return port
    return free_port()


def _wait_healthy(
    agent: LocalAgent, timeout: float, failure: str, log: Path, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Until the agent answers; RuntimeError (`failure`, and where its log is) if it exits or `timeout`
    passes first."""
    deadline = time.monotonic() + timeout
    while not _healthy(agent.url):
        if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
            raise RuntimeError(f"{failure}; see {log}")
        time.sleep(0.05)


def stop_local_agent(home: Path) -> None:
    state_file = home / "agent" / "agent.json"
    known = _recorded(state_file)
    if known is None:
        return
    if processes.pid_alive(known.pid, _marker(home)):  # never a process that took a recycled pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(known.pid, signal.SIGTERM)
    state_file.unlink(missing_ok=True)
