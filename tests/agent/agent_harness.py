"""A real `ferry-agent` process for tests and benchmarks, and helpers to drive jobs through its client."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from activities.agent_client import AgentClient
from core.wire.agent_api import JobSpec, JobStateEvent, Resources, TaskInfo, TaskStatus, TaskSubmitRequest

REPO_ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class AgentProcess:
    process: subprocess.Popen[bytes]
    port: int
    token: str
    data_dir: Path
    log_path: Path
    url: str = field(init=False)

    def __post_init__(self) -> None:
        self.url = f"http://127.0.0.1:{self.port}"

    def client(self, token: str | None = None) -> AgentClient:
        return AgentClient(self.url, self.token if token is None else token)

    def kill(self) -> None:
        """SIGKILL the agent alone: its jobs live in their own sessions and must survive it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_agent(
    workspace: Path,
    data_dir: Path | None = None,
    token: str = "test-token",
    env: Mapping[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
    wait: bool = True,
) -> AgentProcess:
    workspace.mkdir(parents=True, exist_ok=True)
    token_file = workspace / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    data_dir = data_dir or workspace / "data"
    port = free_port()
    log_path = workspace / f"agent-{port}.log"
    command = [sys.executable, "-m", "agent.main", "--port", str(port), "--token-file", str(token_file)]
    command += ["--data-dir", str(data_dir), "--log-level", "warning", *extra_args]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    agent = AgentProcess(process, port, token, data_dir, log_path)
    if wait:
        wait_healthy(agent)
    return agent


def wait_healthy(agent: AgentProcess, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent.process.poll() is not None:
            raise RuntimeError(f"agent exited with {agent.process.returncode}:\n{agent.output()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{agent.url}/api/healthcheck", timeout=1).status_code == 200:
                return
        time.sleep(0.05)
    raise TimeoutError(f"agent not healthy after {timeout}s:\n{agent.output()}")


def kill_jobs(data_dir: Path) -> None:
    """SIGKILL the process group of every process whose command line names the data dir."""
    marker = str(data_dir).encode()
    groups = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if marker in cmdline.read():
                    groups.add(os.getpgid(int(entry)))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    for group in groups - {os.getpgrp()}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)


def stop_agent(agent: AgentProcess) -> None:
    agent.kill()
    kill_jobs(agent.data_dir)


async def eventually(
    probe: Callable[[], Awaitable[T | None]], timeout: float = 30.0, interval: float = 0.05, what: str = ""
) -> T:
    """Poll `probe` until it returns something but None or False: bounded, never a timing assertion."""
    deadline = time.monotonic() + timeout
    while True:
        result = await probe()
        if result is not None and result is not False:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout}s: {what or probe}")
        await asyncio.sleep(interval)


def new_id(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def start_job(
    client: AgentClient,
    commands: list[str],
    task_id: str | None = None,
    resources: Resources | None = None,
    task_fields: Mapping[str, Any] | None = None,
    code: bytes | None = None,
    **spec_fields: Any,
) -> str:
    task_id = task_id or new_id()
    request = TaskSubmitRequest(id=task_id, resources=resources or Resources(), **(task_fields or {}))
    await client.submit_task(request)
    if code is not None:
        await client.upload_code(task_id, code)
    await client.submit_job(
        task_id, JobSpec(run_name=spec_fields.pop("run_name", "test-run"), commands=commands, **spec_fields)
    )
    await client.run(task_id)
    return task_id


async def wait_terminated(client: AgentClient, task_id: str, timeout: float = 30.0) -> TaskInfo:
    async def probe() -> TaskInfo | None:
        task = await client.get_task(task_id)
        return task if task.status == TaskStatus.TERMINATED else None

    return await eventually(probe, timeout, what=f"task {task_id} terminated")


async def pull_all(
    client: AgentClient, task_id: str, timeout: float = 60.0, limit: int | None = None
) -> tuple[bytes, list[JobStateEvent]]:
    """Every log byte and job state, pulled by offset until the job has ended and nothing is left."""
    chunks: list[bytes] = []
    states: list[JobStateEvent] = []
    offset = states_offset = 0
    deadline = time.monotonic() + timeout
    while True:
        kwargs = {"limit": limit} if limit else {}
        reply = await client.pull(task_id, offset=offset, states_offset=states_offset, **kwargs)
        assert reply.offset == offset
        data = reply.log_bytes()
        assert reply.next_offset == offset + len(data)
        chunks.append(data)
        states.extend(reply.job_states)
        offset, states_offset = reply.next_offset, reply.next_states_offset
        if reply.finished and not reply.has_more:
            return b"".join(chunks), states
        if time.monotonic() > deadline:
            raise TimeoutError(f"task {task_id} still running after {timeout}s")
        if not reply.has_more:
            await asyncio.sleep(0.02)


async def wait_for_log(client: AgentClient, task_id: str, needle: bytes, timeout: float = 30.0) -> bytes:
    async def probe() -> bytes | None:
        data = (await client.pull(task_id)).log_bytes()
        return data if needle in data else None

    return await eventually(probe, timeout, what=f"{needle!r} in the log of {task_id}")


def isolation_unavailable() -> str | None:
    """Why this machine cannot give a task its own network namespace; None when it can."""
    if os.geteuid() != 0:
        return "network isolation needs root"
    ip = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin")
    if ip is None:
        return "`ip` (iproute2) is not installed"
    probe = f"ferry-probe-{os.getpid()}"
    added = subprocess.run([ip, "netns", "add", probe], capture_output=True, text=True)
    if added.returncode != 0:
        return f"`ip netns` is unavailable: {added.stderr.strip()}"
    subprocess.run([ip, "netns", "del", probe], capture_output=True)
    return None
