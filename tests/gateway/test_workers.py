"""`python -m gateway --workers 2`: a supervisor and two proxy processes on one port (gateway.workers).

Every request is on a connection of its own (the kernel spreads connections, not requests, over the
workers), so that a few dozen of them reach both workers whatever the hash: each worker counts under its
own gateway id in the store, which is how the test tells them apart.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import sqlalchemy as sa

from gateway.main import parse_args
from tests.gateway.conftest import Harness, Replica, add_replica, add_service, bearer, eventually

ROOT = Path(__file__).parents[2]
REQUESTS = 40


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _children(pid: int) -> set[int]:
    return {int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class Proxy:
    process: subprocess.Popen[bytes]
    url: str
    ready: Path

    def workers(self) -> set[int]:
        return _children(self.process.pid)

    def output(self) -> str:
        return self.process.stdout.read().decode() if self.process.stdout else ""


@pytest.fixture
def proxy_command(harness: Harness, tmp_path: Path) -> Iterator[tuple[list[str], str, Path]]:
    port = _free_port()
    ready = tmp_path / "gateway.ready"
    url = harness.store.engine.url.render_as_string(hide_password=False)
    command = [sys.executable, "-m", "gateway", "--workers", "2", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--database-url", url, "--public-url", "http://ferry.test:8300", "--ready-file", str(ready)]
    yield command, f"http://127.0.0.1:{port}", ready


@pytest.fixture
async def service(harness: Harness) -> tuple[str, Replica]:
    """A service with one ready replica, in the store before the proxy starts (its first table has it)."""
    run_id = add_service(harness.store)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    return run_id, replica


@pytest.fixture
async def proxy(
    proxy_command: tuple[list[str], str, Path], service: tuple[str, Replica]
) -> AsyncIterator[Proxy]:
    command, url, ready = proxy_command
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    started = Proxy(process, url, ready)
    try:
        await eventually(ready.exists, timeout=30)
        yield started
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, 15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def _get_each_on_its_own_connection(url: str, count: int, **kwargs: object) -> list[int]:
    """`count` GETs, each on a new connection; their statuses."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> int:
            async with session.get(url, **kwargs) as response:  # type: ignore[arg-type]
                await response.read()
                return response.status

        return list(await asyncio.gather(*(one() for _ in range(count))))


def _counts_by_proxy(harness: Harness, run_id: str) -> dict[str, int]:
    table = sa.table("service_requests", sa.column("run_id"), sa.column("gateway_id"), sa.column("count"))
    statement = (
        sa.select(table.c.gateway_id, sa.func.sum(table.c.count))
        .where(table.c.run_id == run_id)
        .group_by(table.c.gateway_id)
    )
    with harness.store.engine.connect() as connection:
        return {gateway_id: int(total) for gateway_id, total in connection.execute(statement)}


async def test_two_workers_share_the_port_and_each_counts_its_requests(
    harness: Harness, service: tuple[str, Replica], proxy: Proxy
) -> None:
    run_id, replica = service
    assert proxy.ready.read_text() == str(proxy.process.pid)  # the supervisor's pid, once both listen
    assert len(proxy.workers()) == 2
    statuses = await _get_each_on_its_own_connection(f"{proxy.url}/healthz", REQUESTS)
    assert statuses == [200] * REQUESTS
    url = f"{proxy.url}/proxy/services/main/app/x"
    await eventually(lambda: len(harness.store.live_gateways(time.time() - 5)) == 2, timeout=10)
    statuses = await _get_each_on_its_own_connection(url, REQUESTS, headers=bearer())
    assert statuses == [200] * REQUESTS
    assert len(replica.requests) == REQUESTS

    # Each worker is a proxy of its own in the store, and both served: the autoscaler's sum is the total.
    await eventually(lambda: sum(_counts_by_proxy(harness, run_id).values()) == REQUESTS, timeout=10)
    counts = _counts_by_proxy(harness, run_id)
    live = {g.id for g in harness.store.live_gateways(time.time() - 5)}
    assert len(counts) == 2 and set(counts) == live, counts
    assert all(count > 0 for count in counts.values()), counts
    assert harness.store.request_count(run_id, 0) == REQUESTS
    assert {g.url for g in harness.store.live_gateways(0)} == {"http://ferry.test:8300"}


async def test_a_worker_that_dies_is_started_again_and_requests_keep_succeeding(
    harness: Harness, service: tuple[str, Replica], proxy: Proxy
) -> None:
    run_id, _ = service
    url = f"{proxy.url}/proxy/services/main/app/x"
    await eventually(lambda: len(harness.store.live_gateways(time.time() - 5)) == 2, timeout=10)
    before = proxy.workers()
    killed = min(before)
    os.kill(killed, signal.SIGKILL)
    # Reaped by the supervisor: every thread of it gone, its listening socket closed. (Its /proc stat says
    # Z as soon as its main thread is dead, while the others may still hold the socket.)
    await eventually(lambda: killed not in proxy.workers(), timeout=5)
    # The other one serves meanwhile.
    statuses = await _get_each_on_its_own_connection(url, REQUESTS, headers=bearer())
    assert statuses == [200] * REQUESTS

    await eventually(lambda: len(proxy.workers()) == 2 and killed not in proxy.workers(), timeout=10)
    assert proxy.process.poll() is None
    # The new worker counts under its slot's gateway id: no third proxy in the store.
    await eventually(lambda: sum(_counts_by_proxy(harness, run_id).values()) == REQUESTS, timeout=10)
    served = _counts_by_proxy(harness, run_id)
    statuses = await _get_each_on_its_own_connection(url, REQUESTS, headers=bearer())
    assert statuses == [200] * REQUESTS
    await eventually(lambda: sum(_counts_by_proxy(harness, run_id).values()) == 2 * REQUESTS, timeout=10)
    counts = _counts_by_proxy(harness, run_id)
    assert len(counts) == 2, counts
    assert all(counts[g] > served.get(g, 0) for g in counts), (served, counts)  # both serve again
    assert len(harness.store.live_gateways(time.time() - 5)) == 2


async def test_sigterm_drains_every_worker(
    harness: Harness, service: tuple[str, Replica], proxy: Proxy
) -> None:
    _, replica = service
    await eventually(lambda: len(harness.store.live_gateways(time.time() - 5)) == 2, timeout=10)
    workers = proxy.workers()
    slow = asyncio.create_task(
        _get_each_on_its_own_connection(f"{proxy.url}/proxy/services/main/app/slow", 12, headers=bearer())
    )
    await eventually(lambda: len(replica.requests) == 12, timeout=5)
    proxy.process.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.5)
    assert not slow.done()
    replica.release_slow.set()
    assert await asyncio.wait_for(slow, 10) == [200] * 12  # in flight: finished, on either worker
    code = await asyncio.to_thread(proxy.process.wait, 15)
    output = proxy.output()
    assert code == 0, output
    assert "Traceback" not in output, output
    assert not any(_alive(pid) for pid in workers)
    assert harness.store.live_gateways(0) == []  # every worker left the store's list of proxies


async def test_a_worker_that_cannot_start_fails_the_start(
    harness: Harness, proxy_command: tuple[list[str], str, Path]
) -> None:
    command, url, ready = proxy_command
    port = int(url.rsplit(":", 1)[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        process = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, timeout=30)
    assert process.returncode == 1
    assert b"cannot listen" in process.stderr
    assert not ready.exists()


def test_workers_default_to_one_and_come_from_the_environment() -> None:
    assert parse_args([], {}).workers == 1
    assert parse_args([], {"FERRY_GATEWAY_WORKERS": "3"}).workers == 3
    assert parse_args(["--workers", "2"], {"FERRY_GATEWAY_WORKERS": "3"}).workers == 2
    with pytest.raises(SystemExit):
        parse_args(["--workers", "0"], {})
