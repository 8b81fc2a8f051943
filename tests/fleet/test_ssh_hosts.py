"""Deploying the agent to real `sshd` hosts in network namespaces and reaching it through SSH."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.agent_client import AgentClient
from activities.fleet import FleetActivities
from activities.instances import InstanceDirectory
from activities.ssh import DeployOptions, HostPool, SSHLogin
from activities.ssh_host import SSHAgentHost, SSHDeployError
from core.fleets.messages import DeployInstance, HealthReport, WatchFleet
from core.fleets.placement import InstanceStatus
from core.wire.agent_api import AGENT_SERVICE_NAME
from store import open_store
from testbed.fleets import fleet_configuration
from testbed.helpers import deploy_options, eventually, host_python, run_job, target
from testbed.netns import HostNetwork

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_each_host_runs_its_agent_reached_through_its_own_tunnel(
    pool: HostPool, network: HostNetwork
) -> None:
    assert pool.names() == ["fleet-1", "fleet-2", "fleet-3"]
    urls = set()
    for k in (1, 2, 3):
        client = pool.client(f"fleet-{k}")
        assert (await client.healthcheck()).service == AGENT_SERVICE_NAME
        assert pool.host(f"fleet-{k}").address == network.host(k).address
        urls.add(client.base_url)
        info = await pool.host_info(f"fleet-{k}")
        assert info.cpus >= 1 and info.memory_bytes > 0 and info.total.cpu == info.cpus
    assert len(urls) == 3 and all(url.startswith("http://127.0.0.1:") for url in urls)


async def test_a_hosts_directories_are_its_agents_as_its_user_sees_them(
    pool: HostPool, network: HostNetwork, workdir: Path
) -> None:
    """Where named volumes live and what `~` is on the host (docs/volumes.md), as its deployment found."""
    dirs = pool.dirs("fleet-1")
    assert dirs is not None and pool.dirs("fleet-9") is None
    assert dirs.data_dir == str(workdir / "hosts" / network.host(1).address / "data")
    log, _ = await run_job(pool.client("fleet-1"), ["echo $HOME"])
    assert log.strip() == dirs.home and dirs.home.startswith("/")


async def test_the_agent_listens_on_the_hosts_loopback_only(pool: HostPool, network: HostNetwork) -> None:
    deployed = await pool.deploy(target(network, 1))
    unreachable = AgentClient(f"http://{network.host(1).address}:{deployed.remote_port}", "x", timeout=2)
    with pytest.raises(Exception, match="unreachable"):
        await unreachable.healthcheck()
    await unreachable.aclose()


async def test_a_job_runs_on_its_host(pool: HostPool, network: HostNetwork) -> None:
    for k in (1, 3):
        log, exit_status = await run_job(pool.client(f"fleet-{k}"), ["hostname", "echo in $PWD"])
        assert log.splitlines()[0] == network.host(k).hostname and exit_status == 0


async def test_jobs_on_two_hosts_reach_each_other_at_the_hosts_addresses(
    pool: HostPool, network: HostNetwork
) -> None:
    first, second = network.host(1), network.host(2)
    listen = (
        f"{host_python()} -c \"import socket; s = socket.create_server(('{first.address}', 7441)); "
        'c, _ = s.accept(); print(c.recv(100).decode().strip())"'
    )
    send = (
        f"for i in $(seq 100); do echo hello from $(hostname) > /dev/tcp/{first.address}/7441 && break; "
        "sleep 0.1; done"
    )
    (server_log, _), (_, sent) = await asyncio.gather(
        run_job(pool.client("fleet-1"), [listen]), run_job(pool.client("fleet-2"), [send])
    )
    assert server_log.strip() == f"hello from {second.hostname}" and sent == 0


async def test_the_agents_token_is_fresh_and_private(
    pool: HostPool, workdir: Path, network: HostNetwork
) -> None:
    token_file = workdir / "hosts" / network.host(2).address / "token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    # Everything of the agent's is private, whatever the umask its sshd gave it (022 here).
    base = token_file.parent
    modes = {path.name: path.stat().st_mode & 0o777 for path in [base, *base.iterdir()]}
    assert modes[base.name] == modes["data"] == modes["bundles"] == 0o700
    assert modes["agent.log"] == modes["agent.json"] == 0o600
    tokens = {(workdir / "hosts" / host.address / "token").read_text() for host in network.hosts}
    assert len(tokens) == 3
    wrong = AgentClient(pool.client("fleet-2").base_url, "not-the-token", timeout=5)
    with pytest.raises(Exception, match="401"):
        await wrong.list_tasks()
    await wrong.aclose()


async def test_redeploying_keeps_the_running_agent_and_its_client(
    pool: HostPool, network: HostNetwork
) -> None:
    before = pool.client("fleet-2")
    first = await pool.deploy(target(network, 2))
    again = await pool.deploy(target(network, 2))
    assert first.reused and again.reused and again.pid == first.pid and pool.client("fleet-2") is before


async def test_a_killed_agent_is_started_again_by_its_supervisor_and_reached_as_before(
    pool: HostPool, network: HostNetwork
) -> None:
    """agent/supervisor.py: the same port and token, so the worker's client works again unchanged."""
    seen: list[tuple[str, AgentClient]] = []
    pool.on_client = lambda name, client: seen.append((name, client))
    client = pool.client("fleet-2")
    old = await pool.deploy(target(network, 2))
    os.kill(old.pid, signal.SIGKILL)
    assert await pool.healthy("fleet-2", timeout=1)  # it waits for the agent being started again
    again = await pool.deploy(target(network, 2))
    assert again.reused and again.pid not in (0, old.pid) and again.supervisor_pid == old.supervisor_pid
    assert pool.client("fleet-2") is client and seen == []
    log, exit_status = await run_job(client, ["hostname"])
    assert (log.strip(), exit_status) == (network.host(2).hostname, 0)
    pool.on_client = None


async def test_an_agent_whose_supervisor_died_too_is_started_again_with_a_new_token(
    pool: HostPool, network: HostNetwork
) -> None:
    seen: list[tuple[str, AgentClient]] = []
    pool.on_client = lambda name, client: seen.append((name, client))
    old = await pool.deploy(target(network, 2))
    os.kill(old.supervisor_pid, signal.SIGKILL)
    os.kill(old.pid, signal.SIGKILL)
    assert not await pool.healthy("fleet-2", timeout=3)
    new = await pool.deploy(target(network, 2))
    assert not new.reused and new.pid != old.pid and new.url == old.url
    assert seen == [("fleet-2", pool.client("fleet-2"))]
    assert await pool.healthy("fleet-2")
    pool.on_client = None


async def test_a_dropped_connection_is_opened_again(pool: HostPool, network: HostNetwork) -> None:
    host = pool.host("fleet-1")
    dropped = await host.connection()
    dropped.abort()  # a request in flight on it fails; the next ones open a new connection
    await eventually(lambda: pool.healthy("fleet-1", timeout=5), timeout=20, what="fleet-1 reached again")
    assert await host.connection() is not dropped
    log, _ = await run_job(pool.client("fleet-1"), ["hostname"])
    assert log.strip() == network.host(1).hostname


async def test_a_cut_link_makes_the_host_unhealthy_until_it_is_healed(
    pool: HostPool, network: HostNetwork
) -> None:
    network.cut_host(3)
    try:
        assert not await pool.healthy("fleet-3", timeout=2)
        closed = await eventually(
            lambda: _closed(pool, "fleet-3"), timeout=20, what="keepalives to close the connection"
        )
        assert closed
    finally:
        network.heal_host(3)
    await eventually(lambda: pool.healthy("fleet-3", timeout=3), timeout=30, what="fleet-3 back")
    log, _ = await run_job(pool.client("fleet-3"), ["hostname"])
    assert log.strip() == network.host(3).hostname


async def _closed(pool: HostPool, name: str) -> bool:
    return not pool.host(name).connected


async def test_a_host_reached_through_a_jump_host(
    network: HostNetwork, workdir: Path, bundle_cache: Path
) -> None:
    jump = SSHLogin(hostname=network.host(1).address, user="root", identity_file=str(network.key))
    jumped = HostPool(deploy_options(workdir, bundle_cache, remote_dir=str(workdir / "jumped" / "{name}")))
    try:
        deployed = await jumped.deploy(target(network, 2, name="via-1", proxy_jump=jump))
        log, _ = await run_job(jumped.client("via-1"), ["hostname"])
        assert log.strip() == network.host(2).hostname and deployed.address == network.host(2).address
        await jumped.remove("via-1", stop_agent=True)
    finally:
        await jumped.aclose()


async def test_host_keys_are_checked_against_known_hosts(network: HostNetwork, workdir: Path) -> None:
    first, second = network.host(1), network.host(2)
    key = (network.workdir / first.hostname / "hostkey.pub").read_text().split()[:2]
    other = (network.workdir / second.hostname / "hostkey.pub").read_text().split()[:2]
    known, wrong = workdir / "known_hosts", workdir / "wrong_known_hosts"
    known.write_text(f"{first.address} {' '.join(key)}\n")
    wrong.write_text(f"{first.address} {' '.join(other)}\n")
    trusted = SSHAgentHost(target(network, 1), DeployOptions(known_hosts=str(known), connect_timeout=5))
    await trusted.connection()
    assert trusted.connected
    await trusted.aclose()
    for path, error in ((wrong, "not trusted"), (workdir / "missing", "no known_hosts file at")):
        refused = SSHAgentHost(target(network, 1), DeployOptions(known_hosts=str(path), connect_timeout=5))
        with pytest.raises(SSHDeployError, match=error):
            await refused.connection()
        await refused.aclose()


async def test_the_health_watch_reports_a_host_its_agent_describes_otherwise(
    network: HostNetwork, workdir: Path, bundle_cache: Path, tmp_path: Path
) -> None:
    """docs/fleets.md#what-an-instance-is: at each check of a ready host, what its agent says the instance
    is (hardware, engine, release) is compared with what the fleet knows; a difference is reported READY,
    with the instance as it is now."""
    conf = fleet_configuration(network, "lab")
    pool = HostPool(deploy_options(workdir, bundle_cache))
    fleets = FleetActivities(InstanceDirectory(pool), open_store(f"sqlite:///{tmp_path / 'ferry.db'}"))
    env = ActivityEnvironment()
    try:
        deploy = DeployInstance(project="p", fleet="lab", index=0, configuration=conf)
        slot = await env.run(fleets.deploy_instance, deploy)
        assert slot.agent_release and slot.hardware is not None and slot.hardware.cpus >= 1

        def watch(known: str) -> asyncio.Task[HealthReport]:
            request = WatchFleet(
                project="p", fleet="lab", configuration=conf, ready=[slot.name], unreachable=[],
                described={slot.name: known},
            )  # fmt: skip
            return asyncio.create_task(env.run(fleets.watch_fleet_health, request))

        same = watch(slot.description_key())
        await asyncio.sleep(4)  # a few checks: it is what the fleet knows
        assert not same.done()
        env.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(same, 10)

        env = ActivityEnvironment()
        report = await asyncio.wait_for(watch("what an older agent said"), 30)
        [change] = report.changes
        assert (change.name, change.status, change.slot) == (slot.name, InstanceStatus.READY, slot)
    finally:
        await pool.aclose()
