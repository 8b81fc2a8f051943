"""Services end to end (docs/services.md): a real dev server, worker, local agent and store, the real proxy
in-process, real replicas (tests/lifecycle/replica_server.py, the host's python3) and a real HTTP client.
Load is bounded: a few hundred requests on loopback, each test under half a minute."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.api import FerryAPI
from cli.services import user_token
from core.configuration import ServiceConfiguration, parse_configuration
from core.services.replicas import service_url
from core.status import JobTerminationReason, RunStatus
from gateway.app import Gateway, make_runner
from gateway.options import GatewayOptions
from tests.lifecycle.checks import eventually

SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}
REPLICA = Path(__file__).with_name("replica_server.py")
PORT = 8100  # every replica listens on it: each has its own network namespace


@pytest.fixture
async def proxy(ferry: FerryAPI) -> AsyncIterator[str]:
    """The proxy on a free port of 127.0.0.1, over the worker's store; its base URL."""
    gateway = Gateway(
        ferry.store,
        public_url="http://127.0.0.1",
        options=GatewayOptions(refresh_interval=0.05, flush_interval=0.2, hold_timeout=60.0),
    )
    runner = make_runner(gateway)
    await runner.setup()
    from aiohttp import web

    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}"
    await runner.cleanup()


def service(repo: Path, **fields: Any) -> ServiceConfiguration:
    shutil.copy(REPLICA, repo / "replica_server.py")
    version = fields.pop("version", "v1")
    data = {
        "type": "service",
        "port": PORT,
        "commands": [f"exec python3 replica_server.py {PORT} {version}"],
        "resources": SMALL,
        "auth": False,
        "stop_duration": "20s",
        **fields,
    }
    conf = parse_configuration(data)
    assert isinstance(conf, ServiceConfiguration)
    return conf


async def ready_replicas(ferry: FerryAPI, run_id: str) -> list[str]:
    replicas = await asyncio.to_thread(ferry.store.list_service_replicas, [run_id])
    return [r.id for r in replicas if r.state == "ready"]


async def get_many(client: httpx.AsyncClient, url: str, count: int) -> list[httpx.Response]:
    return [await client.get(url) for _ in range(count)]


async def test_two_replicas_on_one_instance_share_the_load(
    ferry: FerryAPI, proxy: str, tmp_path: Path
) -> None:
    record = await ferry.submit(service(tmp_path, replicas=2), repo_dir=tmp_path)
    await eventually("both replicas ready", lambda: _count_ready(ferry, record.id, 2), limit=60)
    url = service_url(proxy, record.project, record.run_name)
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        answers = await get_many(client, url, 40)
    assert all(a.status_code == 200 for a in answers)
    seen = {a.text.strip() for a in answers}
    assert seen == {"replica 0 v1", "replica 1 v1"}  # both listen on 8100, each in its own namespace
    await ferry.stop(record.run_name)
    final = await ferry.wait(record.run_name)
    assert final.status == RunStatus.TERMINATED
    assert await asyncio.to_thread(ferry.store.list_service_replicas, [record.id]) == []


async def test_auth_asks_for_the_users_token(ferry: FerryAPI, proxy: str, tmp_path: Path) -> None:
    record = await ferry.submit(service(tmp_path, auth=True), repo_dir=tmp_path)
    await eventually("the replica ready", lambda: _count_ready(ferry, record.id, 1), limit=60)
    token = await asyncio.to_thread(user_token, ferry.store, tmp_path / "token", "ana")
    url = service_url(proxy, record.project, record.run_name)
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        refused = await client.get(url)
        wrong = await client.get(url, headers={"Authorization": "Bearer nope"})
        answered = await client.get(url, headers={"Authorization": f"Bearer {token}"})
    assert (refused.status_code, wrong.status_code, answered.status_code) == (401, 401, 200)
    assert "ferry token" in refused.text and answered.text.strip() == "replica 0 v1"
    await ferry.stop(record.run_name)
    await ferry.wait(record.run_name)


async def test_a_replica_failing_its_probe_gets_no_traffic(
    ferry: FerryAPI, proxy: str, tmp_path: Path
) -> None:
    conf = service(tmp_path, replicas=2, probes=[{"url": "/health", "interval": "1s"}])
    record = await ferry.submit(conf, repo_dir=tmp_path)
    await eventually("both replicas ready", lambda: _count_ready(ferry, record.id, 2), limit=60)
    # Replica 1's probe starts failing: it leaves the rotation, replica 0 takes every request.
    await _make_unhealthy(ferry, record.id, replica=1)
    await eventually("replica 1 unready", lambda: _count_ready(ferry, record.id, 1), limit=20)
    await asyncio.sleep(0.3)  # the proxy re-reads the store every 0.05 s here (0.1 s by default)
    url = service_url(proxy, record.project, record.run_name)
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        answers = await get_many(client, url, 20)
    assert {a.text.strip() for a in answers} == {"replica 0 v1"}
    states = {r.replica_num: r.state for r in ferry.store.list_service_replicas([record.id])}
    assert states == {0: "ready", 1: "unready"}
    await ferry.stop(record.run_name)
    await ferry.wait(record.run_name)


async def test_stop_lets_the_requests_in_flight_finish(ferry: FerryAPI, proxy: str, tmp_path: Path) -> None:
    record = await ferry.submit(service(tmp_path), repo_dir=tmp_path)
    await eventually("the replica ready", lambda: _count_ready(ferry, record.id, 1), limit=60)
    url = service_url(proxy, record.project, record.run_name) + "slow?s=2"
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        in_flight = [asyncio.ensure_future(client.get(url)) for _ in range(5)]
        await asyncio.sleep(0.5)
        await ferry.stop(record.run_name)
        answers = await asyncio.gather(*in_flight)
    assert [a.status_code for a in answers] == [200] * 5
    final = await ferry.wait(record.run_name)
    assert final.status == RunStatus.TERMINATED
    [job] = ferry.store.list_job_submissions(record.id)
    drained = [e for e in ferry.job_events(final, job.id) if e.name == "memo" and "drained" in e.context]
    assert drained and drained[0].context["drained"].startswith("in ")


async def test_scale_up_under_load_then_down_then_from_zero(
    ferry: FerryAPI, proxy: str, tmp_path: Path
) -> None:
    scaling = {"target": 5, "window": "2s", "scale_up_delay": "0s", "scale_down_delay": "2s"}
    record = await ferry.submit(service(tmp_path, replicas="0..2", scaling=scaling), repo_dir=tmp_path)
    await eventually("one replica ready", lambda: _count_ready(ferry, record.id, 1), limit=60)
    url = service_url(proxy, record.project, record.run_name)
    async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
        # About 20 requests per second (target 5 per replica): two replicas.
        stop_load = time.monotonic() + 30
        seen: set[str] = set()
        while time.monotonic() < stop_load and len(seen) < 2:
            answer = await client.get(url)
            assert answer.status_code == 200
            seen.add(answer.text.strip())
            await asyncio.sleep(0.05)
        assert len(seen) == 2  # two replicas answered (replica 0 and 1, unless an idle start scaled to 0)
        # No more requests: down to zero after the window and scale_down_delay; the run waits PENDING.
        await eventually(
            "scaled to zero", lambda: _status(ferry, record.run_name, RunStatus.PENDING), limit=30
        )
        run = ferry.store.find_run(record.project, record.run_name)
        assert run is not None and run.status_message == "scaled to zero: a request wakes it"
        # PENDING comes as the last replica starts stopping; it serves until drained, then is unregistered.
        await eventually("no replica left", lambda: _registered_none(ferry, record.id), limit=30)
        jobs = ferry.store.list_job_submissions(record.id)
        assert {j.termination_reason for j in jobs} == {JobTerminationReason.SCALED_DOWN}
        # A request wakes it: held by the proxy, then answered by the new replica.
        woken = await client.get(url)  # how long it waits: bench services (from-zero)
    assert woken.status_code == 200 and woken.text.strip().startswith("replica ")
    # Answered by the replica the request woke (its number is the lowest free one when it is submitted:
    # 0, or 1 while replica 0's last submission is still being cleaned up), not by a drained one.
    awake = [j for j in ferry.store.list_job_submissions(record.id) if j.termination_reason is None]
    assert [f"replica {j.replica_num} v1" for j in awake] == [woken.text.strip()]
    scales = [e.context["replicas"] for e in ferry.run_events(run) if e.name == "scale"]
    assert 2 in scales and scales[scales.index(2) :].count(0) >= 1 and scales[-1] == 1
    await ferry.stop(record.run_name)
    final = await ferry.wait(record.run_name)
    assert final.status == RunStatus.TERMINATED


async def _count_ready(ferry: FerryAPI, run_id: str, count: int) -> bool:
    return len(await ready_replicas(ferry, run_id)) == count


async def _registered_none(ferry: FerryAPI, run_id: str) -> bool:
    return await asyncio.to_thread(ferry.store.list_service_replicas, [run_id]) == []


async def _status(ferry: FerryAPI, run_name: str, status: RunStatus) -> bool:
    run = await ferry.get_run(run_name)
    return run.status == status


async def _make_unhealthy(ferry: FerryAPI, run_id: str, replica: int) -> None:
    """The `unhealthy` file in the replica's working directory (its code's directory on the agent)."""
    home = Path(ferry.store.engine.url.database or "").parent
    jobs = [j for j in ferry.store.list_job_submissions(run_id) if j.replica_num == replica]
    [workdir] = list((home / "agent").glob(f"**/{jobs[-1].id}/**/replica_server.py"))
    (workdir.parent / "unhealthy").write_text("")


async def test_a_rolling_deployment_under_load_fails_no_request(
    ferry: FerryAPI, proxy: str, tmp_path: Path
) -> None:
    record = await ferry.submit(service(tmp_path, replicas=2), repo_dir=tmp_path)
    await eventually("both replicas ready", lambda: _count_ready(ferry, record.id, 2), limit=60)
    url = service_url(proxy, record.project, record.run_name)
    answers: list[tuple[int, str]] = []
    rolled = asyncio.Event()

    async def load(client: httpx.AsyncClient) -> None:
        while not rolled.is_set():
            try:
                answer = await client.get(url)
                answers.append((answer.status_code, answer.text.strip()))
            except httpx.HTTPError as err:
                answers.append((0, repr(err)))
            await asyncio.sleep(0.02)

    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        loading = asyncio.ensure_future(load(client))
        reply = await ferry.deploy(record.run_name, service(tmp_path, replicas=2, version="v2"))
        assert (reply.deployment, reply.changed, reply.refused) == (1, ["commands"], None)
        await eventually("the old replicas gone", lambda: _rolled(ferry, record.id), limit=90)
        rolled.set()
        await loading
        after = [(a.status_code, a.text.strip()) for a in await get_many(client, url, 20)]
    failed = [a for a in answers if a[0] != 200]
    assert failed == [] and len(answers) > 20
    assert {text.split()[-1] for _, text in answers} == {"v1", "v2"}
    assert {text.split()[-1] for _, text in after} == {"v2"} and {status for status, _ in after} == {200}
    run = ferry.store.find_run(record.project, record.run_name)
    assert run is not None and '"serve' not in run.configuration and "v2" in run.configuration
    await ferry.stop(record.run_name)
    await ferry.wait(record.run_name)


async def _rolled(ferry: FerryAPI, run_id: str) -> bool:
    """Every replica of deployment 0 has ended and two of deployment 1 are ready."""
    jobs = await asyncio.to_thread(ferry.store.list_job_submissions, run_id)
    old_done = all(j.status in ("terminated", "done", "failed", "aborted") for j in jobs if j.replica_num < 2)
    replicas = await asyncio.to_thread(ferry.store.list_service_replicas, [run_id])
    fresh = [r for r in replicas if r.deployment_num == 1 and r.state == "ready"]
    return old_done and len(fresh) == 2
