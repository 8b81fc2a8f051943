"""The local backend's agent: one per FERRY_HOME, started by whichever worker (or stack) needs it first.

Its address and token live under FERRY_HOME/agent; a lock file makes concurrent starters agree on one.
All of FERRY_HOME/agent is private to the user (worker.processes.make_private), from the start.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from pydantic import BaseModel

from worker.processes import PRIVATE_FILE, PRIVATE_UMASK, job_code, make_private, private_dir, private_opener


class LocalAgent(BaseModel):
    url: str
    token: str
    pid: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    """The running local agent, started (detached, so it outlives workers) if none answers."""
    base = home / "agent"
    private_dir(home)
    private_dir(base)
    with open(base / "lock", "w", opener=private_opener) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # NotPrivate (a RuntimeError) if a wide file is another user's; each fix said once on stderr.
        for change in make_private(base, skip=job_code):
            print(f"ferry: {change}", file=sys.stderr, flush=True)
        token = _token(base / "token")
        state_file = base / "agent.json"
        if state_file.exists():
            known = LocalAgent.model_validate_json(state_file.read_text())
            if _healthy(known.url):
                return known
        port = free_port()
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
        with open(base / "agent.log", "ab", opener=private_opener) as log:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                umask=PRIVATE_UMASK,  # its tasks' records, specs (env) and logs: private from the start
            )
        agent = LocalAgent(url=f"http://127.0.0.1:{port}", token=token, pid=proc.pid)
        deadline = time.monotonic() + startup_timeout
        while not _healthy(agent.url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the local agent did not start; see {base / 'agent.log'}")
            time.sleep(0.05)
        tmp = state_file.with_name(state_file.name + ".tmp")
        tmp.unlink(missing_ok=True)
        with open(tmp, "w", opener=private_opener) as out:  # it holds the token
            out.write(agent.model_dump_json())
        tmp.replace(state_file)
        return agent


def stop_local_agent(home: Path) -> None:
    state_file = home / "agent" / "agent.json"
    if not state_file.exists():
        return
    known = LocalAgent.model_validate_json(state_file.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(known.pid, signal.SIGTERM)
    state_file.unlink(missing_ok=True)
