"""Losing a host: its namespace killed mid-job; and a torn-down network leaves nothing behind."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.ssh import HostPool
from activities.ssh_host import SSHUnreachable
from core.wire.agent_api import JobSpec, TaskStatus, TaskSubmitRequest
from testbed.helpers import deploy_options, eventually, leftover_processes, target
from testbed.netns import HostNetwork, _ip


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[HostNetwork]:
    net = HostNetwork(2, tmp_path / "netns").up()
    yield net
    net.down()


def _pids(net: HostNetwork) -> set[int]:
    return {
        int(pid) for host in net.hosts for pid in _ip("netns", "pids", host.namespace, check=False).split()
    }


def _alive(pid: int) -> bool:
    """Running: zombies wait for PID 1 (which reaps when it will) but are gone for every other purpose."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


async def _start_sleeper(pool: HostPool, name: str) -> str:
    client = pool.client(name)
    await client.submit_task(TaskSubmitRequest(id="sleeper"))
    await client.submit_job("sleeper", JobSpec(run_name="loss", commands=["sleep 600"]))
    await client.run("sleeper")
    await eventually(lambda: _running(pool, name), what=f"the job on {name} to run")
    return "sleeper"


async def _running(pool: HostPool, name: str) -> bool:
    return (await pool.client(name).get_task("sleeper")).status == TaskStatus.RUNNING


async def test_a_killed_host_stops_answering_and_cannot_be_redeployed(
    pair: HostNetwork, tmp_path: Path, bundle_cache: Path
) -> None:
    pool = HostPool(deploy_options(tmp_path / "work", bundle_cache))
    try:
        await asyncio.gather(*(pool.deploy(target(pair, k)) for k in (1, 2)))
        await _start_sleeper(pool, "fleet-2")
        pair.kill_host(2)
        await eventually(lambda: _unhealthy(pool, "fleet-2"), timeout=20, what="fleet-2 to stop answering")
        with pytest.raises(SSHUnreachable, match="fleet-2: cannot connect to root@"):
            await pool.deploy(target(pair, 2))
        assert await pool.healthy("fleet-1")
    finally:
        await pool.aclose()


async def _unhealthy(pool: HostPool, name: str) -> bool:
    return not await pool.healthy(name, timeout=2)


async def test_tearing_the_network_down_leaves_no_namespace_sshd_agent_or_job(
    tmp_path: Path, bundle_cache: Path
) -> None:
    net = HostNetwork(2, tmp_path / "netns").up()
    pool = HostPool(deploy_options(tmp_path / "work", bundle_cache))
    try:
        await asyncio.gather(*(pool.deploy(target(net, k)) for k in (1, 2)))
        await _start_sleeper(pool, "fleet-1")
        before = _pids(net)
        assert len(before) >= 4  # two sshd, two agents, a job
    finally:
        await pool.aclose()
        net.down()
    assert net.namespaces() == [] and [pid for pid in before if _alive(pid)] == []
    assert leftover_processes(tmp_path) == []
    assert net.root_link not in _ip("-o", "link", "show")
