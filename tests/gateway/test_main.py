"""`python -m gateway` as a process: ready file, /healthz, a proxied request, a clean exit on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from gateway.main import parse_args
from tests.gateway.conftest import Harness, add_replica, add_service, bearer, eventually

ROOT = Path(__file__).parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_python_m_gateway_serves_and_stops_on_sigterm(
    harness: Harness, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    run_id = add_service(harness.store)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    port = _free_port()
    ready = tmp_path / "gateway.ready"
    url = harness.store.engine.url.render_as_string(hide_password=False)
    command = [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--database-url", url, "--public-url", "http://ferry.test:8300", "--ready-file", str(ready)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        await eventually(ready.exists, timeout=20)
        assert ready.read_text() == str(process.pid)
        proxy = f"http://127.0.0.1:{port}"
        async with http.get(f"{proxy}/healthz") as response:
            assert (response.status, await response.text()) == (200, "ok")
        async with http.get(f"{proxy}/proxy/services/main/app/x", headers=bearer()) as response:
            assert (await response.json())["replica"] == "one"
        (live,) = harness.store.live_gateways(time.time() - 5)
        assert live.url == "http://ferry.test:8300"

        process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(process.wait, 10)
        output = process.stdout.read().decode() if process.stdout else ""
        assert code == 0, output
        assert "Traceback" not in output, output
        assert harness.store.live_gateways(0) == []  # it left the store's list of proxies
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_defaults_come_from_the_environment() -> None:
    env = {
        "FERRY_GATEWAY_HOST": "0.0.0.0",
        "FERRY_GATEWAY_PORT": "9000",
        "FERRY_DATABASE_URL": "postgresql+psycopg://ferry@db/ferry",
        "FERRY_GATEWAY_HOLD_TIMEOUT": "30",
        "FERRY_GATEWAY_HEAD_TIMEOUT": "5",
    }
    args = parse_args([], env)
    assert (args.host, args.port, args.database_url) == (
        "0.0.0.0",
        9000,
        "postgresql+psycopg://ferry@db/ferry",
    )
    assert (args.public_url, args.hold_timeout, args.ready_file) == ("http://127.0.0.1:9000", 30.0, None)
    assert args.head_timeout == 5.0
    args = parse_args(["--port", "8400", "--public-url", "https://proxy.example"], {"FERRY_HOME": "/f"})
    assert args.head_timeout == 20.0
    assert (args.host, args.port, args.public_url) == ("127.0.0.1", 8400, "https://proxy.example")
    assert args.database_url == "sqlite:////f/ferry.db"
