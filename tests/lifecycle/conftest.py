"""A real Temporal dev server, a real local agent, a real store, and an in-process worker."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from cli.api import FerryAPI
from core.settings import Settings
from embedded.devserver import dev_server_command, wait_for_port
from embedded.local_agent import free_port, stop_local_agent
from store import open_store
from tests.lifecycle.worker_process import READY
from worker.main import build_worker, local_instances
from worker.temporal import connect

REPO = Path(__file__).resolve().parents[2]
WORKER_START_LIMIT = 60.0


@pytest.fixture(scope="session")
def temporal_address() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        dev_server_command(port=port, ui_port=None, db_file=None),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, 60, proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def ferry_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("ferry-home")
    yield home
    stop_local_agent(home)


@pytest.fixture
async def ferry(temporal_address: str, ferry_home: Path) -> AsyncIterator[FerryAPI]:
    """The API on a worker of its own task queue, so tests do not see each other's runs."""
    settings = Settings.from_env({"FERRY_HOME": str(ferry_home)})
    store = open_store(settings.database_url)
    client = await connect(temporal_address)
    instances = local_instances(settings)
    queue = f"test-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, instances, store, task_queue=queue):
        yield FerryAPI(client, store, project=queue, task_queue=queue)
    await instances.aclose()


@pytest.fixture
async def bare_ferry(temporal_address: str, ferry_home: Path) -> FerryAPI:
    """The API on a task queue of its own that no worker in this process serves."""
    settings = Settings.from_env({"FERRY_HOME": str(ferry_home)})
    client = await connect(temporal_address)
    queue = f"test-{uuid.uuid4().hex[:8]}"
    return FerryAPI(client, open_store(settings.database_url), project=queue, task_queue=queue)


class WorkerProcesses:
    """Ferry workers in processes of their own (tests.lifecycle.worker_process), for tests that kill them."""

    def __init__(self, temporal_address: str, ferry_home: Path) -> None:
        self._env = {
            **os.environ,
            "FERRY_HOME": str(ferry_home),
            "FERRY_TEMPORAL_ADDRESS": temporal_address,
        }
        self.started: list[subprocess.Popen[str]] = []
        # Each worker's stderr, for a test to show when the worker did not end as it should.
        self._stderr_dir = ferry_home / "worker-stderr"
        self._stderr: dict[int, Path] = {}

    def stderr_of(self, proc: subprocess.Popen[str], limit: int = 4000) -> str:
        """The end of what `proc` wrote to its stderr."""
        text = self._stderr[proc.pid].read_text(errors="replace")
        return text[-limit:]

    def start(self, queue: str, *, broken_release: bool = False) -> subprocess.Popen[str]:
        """A new worker on `queue`, once it polls (`broken_release`: see tests.lifecycle.worker_process)."""
        self._stderr_dir.mkdir(exist_ok=True)
        stderr = self._stderr_dir / f"{len(self.started)}.txt"
        with stderr.open("w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.lifecycle.worker_process", queue]
                + (["--broken-release"] if broken_release else []),
                cwd=REPO,
                env=self._env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.started.append(proc)
        self._stderr[proc.pid] = stderr
        assert proc.stdout is not None
        deadline = time.monotonic() + WORKER_START_LIMIT
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"the worker did not start in {WORKER_START_LIMIT:.0f}s"
            readable, _, _ = select.select([proc.stdout], [], [], remaining)
            if readable:
                line = proc.stdout.readline()
                assert line, f"the worker exited with status {proc.wait()}: {self.stderr_of(proc)}"
                if line.strip() == READY:
                    return proc

    def stop_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.started:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def worker_processes(temporal_address: str, ferry_home: Path) -> Iterator[WorkerProcesses]:
    workers = WorkerProcesses(temporal_address, ferry_home)
    try:
        yield workers
    finally:
        workers.stop_all()
