"""`ferry server`: the embedded stack in the background (start, status, stop) and in the foreground."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx

from embedded.stack import Stack, pid_alive
from tests.e2e.conftest import Ferry, ferry_env


def test_start_status_stop(tmp_path: Path) -> None:
    ferry = Ferry(tmp_path, ferry_env(tmp_path))
    try:
        started = ferry("server", "start")
        assert started.returncode == 0, started.stderr
        status = json.loads(ferry("server", "status", "--json").stdout)
        assert status["running"] is True
        address, ui_url = status["address"], status["ui_url"]
        assert address.startswith("127.0.0.1:") and ui_url.startswith("http://127.0.0.1:")
        assert address in started.stdout and ui_url in started.stdout
        pids = {p["name"]: p["pid"] for p in status["processes"]}
        assert set(pids) == {"temporal", "worker", "proxy", "api", "agent"}
        proxy = next(p for p in status["processes"] if p["name"] == "proxy")
        assert proxy["address"].startswith("http://127.0.0.1:") and proxy["address"] in started.stdout
        assert httpx.get(proxy["address"] + "/healthz", trust_env=False).text == "ok"
        api = next(p for p in status["processes"] if p["name"] == "api")
        assert api["address"].startswith("http://127.0.0.1:") and api["address"] in started.stdout
        # Without a login, the CLI reaches the stack's API as this home's user, its first: an admin.
        users = ferry("user", "list", "--json")
        assert users.returncode == 0, users.stderr
        assert [(u["name"], u["role"]) for u in json.loads(users.stdout)] == [("tester", "admin")]
        assert ferry("project", "add", "research").returncode == 0
        assert ferry("project", "list").stdout.split() == [
            "NAME",
            "CREATED",
            "BY",
            "main",
            "-",
            "research",
            "tester",
        ]
        for name in ("temporal", "worker", "proxy", "api"):
            assert (tmp_path / "stack" / f"{name}.pid").read_text().strip() == str(pids[name])
        assert (tmp_path / "stack" / "temporal.db").exists()
        # Idempotent: a second start finds everything running and starts nothing.
        assert ferry("server", "start").returncode == 0
        again = json.loads(ferry("server", "status", "--json").stdout)
        assert {p["name"]: p["pid"] for p in again["processes"]} == pids
    finally:
        stopped = ferry("server", "stop")
    assert stopped.stdout == "stopped: api, proxy, worker, temporal, agent\n"
    assert not any(pid_alive(pid) for pid in pids.values())
    assert ferry("server", "status").returncode == 3  # not running
    refused = ferry("server", "upgrade")  # tests/upgrade upgrades a running one
    assert (refused.returncode, refused.stderr) == (
        3,
        f"ferry server upgrade: the stack of {tmp_path} is not running: `ferry server start` it\n",
    )
    # The ports are kept for the next start, so that the addresses stay the same.
    assert json.loads((tmp_path / "stack" / "stack.json").read_text())["port"] == int(address.split(":")[1])


def test_foreground_server_stops_its_stack_on_sigterm(tmp_path: Path) -> None:
    ferry = Ferry(tmp_path, ferry_env(tmp_path))
    server = ferry.popen("server")
    stack = Stack(tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not stack.is_running():
            assert server.poll() is None, server.communicate()
            assert time.monotonic() < deadline, "the stack did not start"
            time.sleep(0.1)
        pids = [p.pid for p in stack.status().processes]
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            stack.stop()
    assert server.returncode == 0, err
    assert "running" in out and out.endswith("stopped: api, proxy, worker, temporal, agent\n")
    assert not any(pid_alive(pid) for pid in pids)
