"""A service with a router group (docs/services.md#a-router-group) through the real `ferry` command on the
embedded stack and its real proxy: the router group's replica runs a stand-in for SGLang's router
(sglang_router_server.py, which keeps the workers registered with it and forwards to them), the other
groups' replicas are its workers. The proxy sends every request to the router; the worker registers each
ready worker replica with it (prefill with its bootstrap port, decode), and a worker scaled down is removed.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.conftest import SMALL, Ferry

SERVER = Path(__file__).with_name("sglang_router_server.py")


def write_service(directory: Path) -> str:
    shutil.copy(SERVER, directory / "sglang_router_server.py")
    path = directory / "routed.yml"
    run = "exec python3 sglang_router_server.py"
    path.write_text(
        "type: service\nname: routed\nport: 8100\nauth: false\n"
        "replicas:\n"
        f"  - {{name: router, count: 1, router: {{type: sglang}}, commands: ['{run} router 8100']}}\n"
        f"  - {{name: prefill, count: 1, commands: ['{run} worker 8100 prefill']}}\n"
        "  - name: decode\n"
        "    count: 1..2\n"
        "    scaling: {target: 4, window: 2s, scale_up_delay: 0s, scale_down_delay: 1s}\n"
        f"    commands: ['{run} worker 8100 decode']\n"
        f"{SMALL}"
    )
    return str(path)


def workers(client: httpx.Client, url: str) -> list[dict[str, Any]]:
    """The router's workers, asked through the proxy: only the router answers /workers with JSON."""
    answer = client.get(url + "workers")
    assert answer.status_code == 200, answer.text
    listed: list[dict[str, Any]] = answer.json()["workers"]
    return sorted(listed, key=lambda w: (str(w["worker_type"]), str(w["url"])))


def wait_for(client: httpx.Client, url: str, count: int, limit: float = 45) -> list[dict[str, Any]]:
    deadline = time.monotonic() + limit
    while True:
        try:
            listed = workers(client, url)
        except (httpx.HTTPError, AssertionError, json.JSONDecodeError):
            listed = []
        if len(listed) == count:
            return listed
        assert time.monotonic() < deadline, f"the router lists {listed}, not {count} workers"
        time.sleep(0.5)  # at most 2 requests a second: below the decode group's `target`, no scale-up


def test_the_router_gets_the_requests_and_the_workers(ferry: Ferry, tmp_path: Path) -> None:
    applied = ferry("apply", "-y", "-d", "-f", write_service(tmp_path))
    assert applied.returncode == 0, applied.stderr
    [line] = [line for line in applied.stderr.splitlines() if line.startswith("service at ")]
    url = line.split()[2]
    with httpx.Client(trust_env=False, timeout=10) as client:
        decode, prefill = wait_for(client, url, 2)
        assert decode["worker_type"] == "decode" and "bootstrap_port" not in decode
        assert prefill["worker_type"] == "prefill" and prefill["bootstrap_port"] == 8998
        assert decode["url"] != prefill["url"] and decode["url"].endswith(":8100")
        # Every request reaches the router (never a worker directly), which sends it on to a worker.
        answers = {client.get(url + "generate").text.strip() for _ in range(10)}
        assert all(a.startswith("router -> worker ") for a in answers), answers
        assert {a.split()[-1] for a in answers} == {"prefill", "decode"}, answers
        # The requests (counted at the proxy, all the router's) scale the decode group up: its new replica
        # is registered; once the load is gone it scales down, and its replica is removed from the router.
        for _ in range(40):
            client.get(url + "generate")
        listed = wait_for(client, url, 3)
        assert [w["worker_type"] for w in listed] == ["decode", "decode", "prefill"]
        assert wait_for(client, url, 2) == [decode, prefill]
    # The router replica's job logs each change of its workers (and what a router refuses) as an event.
    events = ferry("events", "routed", "--replica", "0").stdout
    assert "router: added" in events and "router: removed" in events, events
    assert ferry("stop", "-y", "routed").returncode == 0
