"""A service with replica groups end to end (docs/services.md#replica-groups): each group runs its own
commands, both serve the one URL through the real proxy, and a stop ends every group."""

from __future__ import annotations

from pathlib import Path

import httpx

from cli.api import FerryAPI
from core.services.replicas import service_url
from core.status import RunStatus
from tests.lifecycle.checks import eventually
from tests.lifecycle.test_services import PORT, _count_ready, get_many, proxy, service

__all__ = ["proxy"]  # the proxy fixture


async def test_two_groups_serve_one_url_each_with_its_commands(
    ferry: FerryAPI, proxy: str, tmp_path: Path
) -> None:
    groups = [
        {"name": "blue", "count": 1, "commands": [f"exec python3 replica_server.py {PORT} blue"]},
        {"name": "green", "count": 1, "commands": [f"exec python3 replica_server.py {PORT} green"]},
    ]
    conf = service(tmp_path, replicas=groups, commands=[])
    record = await ferry.submit(conf, repo_dir=tmp_path)
    await eventually_ready(ferry, record.id)
    url = service_url(proxy, record.project, record.run_name)
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        answers = await get_many(client, url, 40)
    assert all(a.status_code == 200 for a in answers)
    assert {a.text.strip() for a in answers} == {"replica 0 blue", "replica 1 green"}
    await ferry.stop(record.run_name)
    final = await ferry.wait(record.run_name)
    assert final.status == RunStatus.TERMINATED
    submits = {
        e.context["replica"]: e.context.get("group")
        for e in ferry.run_events(final)
        if e.name == "job-submit"
    }
    assert submits == {0: "blue", 1: "green"}


async def eventually_ready(ferry: FerryAPI, run_id: str) -> None:
    await eventually("both groups' replicas ready", lambda: _count_ready(ferry, run_id, 2), limit=60)
