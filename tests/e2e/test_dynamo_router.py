"""A service with a Dynamo router group (docs/services.md#a-dynamo-router) through the real `ferry`
command on the embedded stack and its real proxy: the router group's replica runs a stand-in for Dynamo's
frontend and its etcd (dynamo_router_server.py); the other groups' replicas are its workers, which wait,
as dstack's Dynamo example does, for the router's port at $DSTACK_ROUTER_INTERNAL_IP before they register
there. Each worker starts only once the router runs, is told its address, and reaches it from its own
network namespace; the proxy sends every request to the router.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.conftest import SMALL, Ferry

SERVER = Path(__file__).with_name("dynamo_router_server.py")
WAIT = "until (echo > /dev/tcp/$DSTACK_ROUTER_INTERNAL_IP/2379) 2>/dev/null; do sleep 0.2; done"


def write_service(directory: Path) -> str:
    shutil.copy(SERVER, directory / "dynamo_router_server.py")
    path = directory / "dynamo.yml"
    run = "exec python3 dynamo_router_server.py"
    path.write_text(
        "type: service\nname: dyn\nport: 8100\nauth: false\n"
        "replicas:\n"
        f"  - {{name: frontend, count: 1, router: {{type: dynamo}}, commands: ['{run} router 8100']}}\n"
        f"  - {{name: prefill, count: 1, commands: ['{WAIT}', '{run} worker 8100 prefill']}}\n"
        f"  - {{name: decode, count: 2, commands: ['{WAIT}', '{run} worker 8100 decode']}}\n"
        f"{SMALL}"
    )
    return str(path)


def registered(client: httpx.Client, url: str, count: int, limit: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + limit
    listed: list[dict[str, Any]] = []
    while True:
        try:
            answer = client.get(url + "workers")
            listed = answer.json() if answer.status_code == 200 else []
        except (httpx.HTTPError, json.JSONDecodeError):
            listed = []
        if len(listed) == count:
            return sorted(listed, key=lambda w: str(w["group"]))
        assert time.monotonic() < deadline, f"the frontend lists {listed}, not {count} workers"
        time.sleep(0.3)


def test_the_workers_are_told_the_routers_address_and_it_gets_the_requests(
    ferry: Ferry, tmp_path: Path
) -> None:
    applied = ferry("apply", "-y", "-d", "-f", write_service(tmp_path))
    assert applied.returncode == 0, applied.stderr
    [line] = [line for line in applied.stderr.splitlines() if line.startswith("service at ")]
    url = line.split()[2]
    with httpx.Client(trust_env=False, timeout=10) as client:
        workers = registered(client, url, 3)
        assert [w["group"] for w in workers] == ["decode", "decode", "prefill"]
        # Each was told the address the router is reached at, under dstack's name and Ferry's.
        for worker in workers:
            assert worker["told"] == worker["reached_at"] == worker["ferry_told"], workers
        # Every request goes to the frontend, none to a worker directly.
        answers = {client.get(url + "generate").text.strip() for _ in range(10)}
        assert answers == {"frontend (3 workers)"}, answers
    # A worker waited, placed, for the router replica to run before it started.
    events = ferry("events", "dyn", "--replica", "1").stdout
    assert "waiting=router" in events, events
    assert ferry("stop", "-y", "dyn").returncode == 0
