"""Benchmark of a real ferry-agent: start latency, log throughput, memory per running task.

Run with `.venv/bin/python bench/agent_bench.py`; prints `name: value` lines. Not part of the test run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from activities.agent_client import AgentClient  # noqa: E402
from core.wire.agent_api import DEFAULT_PULL_LIMIT, JobSpec, TaskStatus, TaskSubmitRequest  # noqa: E402

LATENCY_SAMPLES = 40
SLEEPING_TASKS = 100
LOG_LINES = 12_500_000  # `seq` output of about 101 MB


class Agent:
    def __init__(self, workspace: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        workspace.mkdir(parents=True)
        self.data_dir = workspace / "data"
        token_file = workspace / "token"
        token_file.write_text("bench-token")
        token_file.chmod(0o600)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agent.main", "--port", str(self.port), "--token-file", str(token_file)]
            + ["--data-dir", str(self.data_dir), "--log-level", "warning"],
            cwd=REPO_ROOT,
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/api/healthcheck").status_code == 200:
                    return
            time.sleep(0.05)
        raise TimeoutError("the agent did not start")

    def client(self) -> AgentClient:
        return AgentClient(self.url, "bench-token", timeout=120)

    def rss_kb(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        # The agent's jobs outlive it by design: end their process groups too.
        marker = str(self.data_dir).encode()
        for entry in os.listdir("/proc"):
            with contextlib.suppress(OSError):
                if entry.isdigit() and marker in Path(f"/proc/{entry}/cmdline").read_bytes():
                    os.killpg(os.getpgid(int(entry)), signal.SIGKILL)


async def start(client: AgentClient, commands: list[str]) -> tuple[str, float]:
    """Submit a task, its job and the run; return the id and the seconds until the process ran."""
    task_id = f"b-{uuid.uuid4().hex[:12]}"
    started = time.perf_counter()
    await client.submit_task(TaskSubmitRequest(id=task_id))
    await client.submit_job(task_id, JobSpec(run_name="bench", commands=commands))
    task = await client.run(task_id)
    elapsed = time.perf_counter() - started
    assert task.status in (TaskStatus.RUNNING, TaskStatus.TERMINATED), task
    return task_id, elapsed


async def wait_finished(client: AgentClient, task_id: str) -> None:
    while (await client.get_task(task_id)).status != TaskStatus.TERMINATED:
        await asyncio.sleep(0.01)


async def latency(client: AgentClient) -> dict[str, float]:
    to_running, to_output = [], []
    for _ in range(LATENCY_SAMPLES):
        started = time.perf_counter()
        task_id, elapsed = await start(client, ["echo ready"])
        to_running.append(elapsed)
        while not (await client.pull(task_id)).log_bytes():
            await asyncio.sleep(0.001)
        to_output.append(time.perf_counter() - started)
        await wait_finished(client, task_id)
        await client.remove(task_id)
    return {
        "agent_submit_to_running_p50_ms": statistics.median(to_running) * 1000,
        "agent_submit_to_first_output_p50_ms": statistics.median(to_output) * 1000,
    }


async def throughput(client: AgentClient) -> dict[str, float]:
    task_id, _ = await start(client, [f"seq 1 {LOG_LINES}"])
    await wait_finished(client, task_id)
    results: dict[str, float] = {}
    for name, limit in (
        ("agent_log_pull_throughput_mb_s", DEFAULT_PULL_LIMIT),
        ("agent_log_pull_1mib_mb_s", 2**20),
    ):
        offset, started = 0, time.perf_counter()
        while True:
            reply = await client.pull(task_id, offset=offset, limit=limit)
            reply.log_bytes()  # decoding is part of what a reader pays
            offset = reply.next_offset
            if not reply.has_more:
                break
        results[name] = offset / 1e6 / (time.perf_counter() - started)
    received, started = 0, time.perf_counter()
    async for chunk in client.stream_logs(task_id):
        received += len(chunk)
    results["agent_log_websocket_throughput_mb_s"] = received / 1e6 / (time.perf_counter() - started)
    assert received == offset, (received, offset)
    results["agent_log_size_mb"] = offset / 1e6
    await client.remove(task_id)
    return results


async def memory(agent: Agent, client: AgentClient) -> dict[str, float]:
    task_id, _ = await start(client, ["true"])  # warm every code path before the baseline
    await wait_finished(client, task_id)
    await client.pull(task_id)
    await client.remove(task_id)
    await asyncio.sleep(0.5)
    baseline = agent.rss_kb()
    ids = [(await start(client, ["sleep 1000"]))[0] for _ in range(SLEEPING_TASKS)]
    await asyncio.sleep(0.5)
    running = [task for task in await client.list_tasks() if task.status == TaskStatus.RUNNING]
    assert len(running) == SLEEPING_TASKS, len(running)
    loaded = agent.rss_kb()
    for task_id in ids:
        await client.terminate(task_id, timeout=0)
    return {
        "agent_rss_idle_mb": baseline / 1024,
        "agent_rss_with_100_tasks_mb": loaded / 1024,
        "agent_rss_per_running_task_kb": (loaded - baseline) / SLEEPING_TASKS,
    }


async def main() -> None:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ferry-agent-bench-") as tmp:
        for name, bench in (("latency", latency), ("throughput", throughput), ("memory", None)):
            agent = Agent(Path(tmp) / name)  # a fresh agent each, so one measure never skews another
            try:
                async with agent.client() as client:
                    results.update(await (memory(agent, client) if bench is None else bench(client)))
            finally:
                agent.stop()
    for name, value in results.items():
        print(f"{name}: {value:.1f}" if isinstance(value, float) else f"{name}: {value}")


if __name__ == "__main__":
    asyncio.run(main())
