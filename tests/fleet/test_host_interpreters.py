"""What a host must have for its agent (docs/fleets.md#ssh-fleets): its distribution's `python3`, 3.9 or
later, able to load the bundle's packages; an SFTP subsystem it need not have. A host that cannot run the
agent is refused in one line that names it and says why; nothing is left running there. (Hosts on
Debian 11's 3.9 and 13's 3.13 run their agents in tests/fleet/test_distribution_hosts.py.)"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from activities.agent_bundle import AgentBundle
from activities.ssh import DeployOptions, HostPool, SSHTarget
from activities.ssh_host import SSHAgentHost, SSHDeployError
from testbed.fleets import DEPLOY_WAIT, cluster_on, fleet_configuration
from testbed.helpers import DISTRIBUTION_PYTHON, deploy_options, leftover_processes, run_job, target
from testbed.netns import HostNetwork

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def no_sftp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostNetwork]:
    """One host whose sshd has no SFTP subsystem."""
    net = HostNetwork(1, tmp_path_factory.mktemp("netns"), sftp=False).up()
    yield net
    net.down()


async def _refusal(options: DeployOptions, host: SSHTarget) -> str:
    """Why deploying on `host` fails, in one line; nothing of the agent left running there."""
    pool = HostPool(options)
    try:
        with pytest.raises(SSHDeployError) as error:
            await pool.deploy(host)
    finally:
        await pool.aclose()
    message = str(error.value)
    assert "\n" not in message and leftover_processes(Path(options.remote_dir)) == []
    return message


def fake_python(directory: Path, line: str) -> Path:
    """An interpreter that says it is `line` (VERSION_SCRIPT's `major minor EXT_SUFFIX`), and runs nothing."""
    python = directory / f"python-{line.split()[0]}.{line.split()[1]}"
    python.write_text(f"#!/bin/sh\necho '{line}'\n")
    python.chmod(0o755)
    return python


async def test_a_host_python_older_than_3_9_is_refused_before_anything_is_sent(
    no_sftp: HostNetwork, tmp_path: Path, bundle_cache: Path
) -> None:
    old = fake_python(tmp_path, "3 8 .cpython-38-x86_64-linux-gnu.so")
    remote = tmp_path / "refused"
    options = deploy_options(tmp_path, bundle_cache, python=str(old), remote_dir=str(remote))
    message = await _refusal(options, target(no_sftp, 1, name="old-python"))
    assert message == (
        f"old-python: {old} on the host is Python 3.8 (.cpython-38-x86_64-linux-gnu.so), but the agent "
        "needs Python 3.9 or later: install one there, or point FERRY_SSH_PYTHON to it"
    )
    assert not remote.exists()


async def test_a_host_python_the_agent_has_no_packages_for_is_refused_in_one_line(
    no_sftp: HostNetwork, tmp_path: Path, bundle_cache: Path
) -> None:
    """Alpine's musl, say: no manylinux wheel loads there."""
    musl = fake_python(tmp_path, "3 12 .cpython-312-x86_64-linux-musl.so")
    options = deploy_options(tmp_path, bundle_cache, python=str(musl))
    message = await _refusal(options, target(no_sftp, 1, name="musl"))
    assert message == (
        f"musl: {musl} on the host is Python 3.12 (.cpython-312-x86_64-linux-musl.so), but the agent needs "
        "CPython on Linux x86_64 or aarch64 with glibc: install one there, or point FERRY_SSH_PYTHON to it"
    )


async def test_a_host_without_that_python_is_refused_in_one_line(
    no_sftp: HostNetwork, tmp_path: Path, bundle_cache: Path
) -> None:
    options = deploy_options(tmp_path, bundle_cache, python="/nonexistent/python3")
    message = await _refusal(options, target(no_sftp, 1, name="no-python"))
    assert message.startswith("no-python: cannot run /nonexistent/python3 on the host (")


async def test_a_host_without_sftp_gets_its_agent_over_ssh_alone(
    no_sftp: HostNetwork, tmp_path: Path, bundle_cache: Path
) -> None:
    options = deploy_options(tmp_path, bundle_cache)
    probe = SSHAgentHost(target(no_sftp, 1), options)
    try:
        with pytest.raises(asyncssh.Error):  # the host really has none
            async with (await probe.connection()).start_sftp_client():
                pass
    finally:
        await probe.aclose()
    pool = HostPool(options)
    try:
        deployed = await pool.deploy(target(no_sftp, 1))
        assert not deployed.reused
        log, exit_status = await run_job(pool.client("fleet-1"), ["hostname"])
        assert (log.strip(), exit_status) == (no_sftp.host(1).hostname, 0)
        await pool.remove("fleet-1", stop_agent=True)
    finally:
        await pool.aclose()
    assert leftover_processes(tmp_path) == []


async def test_an_interpreter_that_cannot_load_the_agents_packages_is_refused_in_one_line(
    no_sftp: HostNetwork, tmp_path: Path, bundle: AgentBundle, bundle_cache: Path
) -> None:
    """A compiled package the host's Python cannot load (built for another libc, say): here the bundle's
    pydantic_core, overwritten on the host. The agent's first start fails, and says so; it is not retried."""
    remote = tmp_path / "remote"
    unpacked = remote / "bundles" / bundle.name
    with tarfile.open(bundle.path) as tar:
        tar.extractall(unpacked, filter="data")
    [compiled] = unpacked.glob(f"pydantic_core/_pydantic_core*{bundle.ext_suffix}")
    compiled.write_bytes(b"not a shared object")
    options = deploy_options(tmp_path, bundle_cache, remote_dir=str(remote))
    message = await _refusal(options, target(no_sftp, 1, name="cannot-load"))
    expected = f"cannot-load: the agent cannot start with {DISTRIBUTION_PYTHON} on the host: ImportError: "
    assert message.startswith(expected) and compiled.name in message


async def test_a_bundle_that_arrived_damaged_is_refused_then_sent_again(
    no_sftp: HostNetwork, tmp_path: Path, bundle: AgentBundle, bundle_cache: Path
) -> None:
    remote = tmp_path / "remote"
    (remote / "bundles").mkdir(parents=True)
    damaged = remote / "bundles" / f"{bundle.name}.tar.gz"
    damaged.write_bytes(bundle.path.read_bytes()[:-100])  # a transfer cut short
    pool = HostPool(deploy_options(tmp_path, bundle_cache, remote_dir=str(remote)))
    try:
        with pytest.raises(SSHDeployError, match=r"^fleet-1: the agent bundle arrived damaged"):
            await pool.deploy(target(no_sftp, 1))
        assert not damaged.exists()
        deployed = await pool.deploy(target(no_sftp, 1))
        assert not deployed.reused and await pool.healthy("fleet-1")
        await pool.remove("fleet-1", stop_agent=True)
    finally:
        await pool.aclose()


async def test_ferry_apply_of_a_fleet_refuses_a_host_whose_python_cannot_run_the_agent(
    no_sftp: HostNetwork,
    temporal_address: str,
    ferry_home: Path,
    bundle_cache: Path,
    tmp_path: Path,
) -> None:
    """Ubuntu 20.04's python3 (3.8), say. The fleet's apply names the host and the reason, in one line;
    nothing is sent there."""
    python = fake_python(tmp_path, "3 8 .cpython-38-x86_64-linux-gnu.so")
    repo = tmp_path / "repo"
    repo.mkdir()
    workdir = tmp_path / "work"
    async with cluster_on(
        no_sftp, temporal_address, ferry_home, workdir, bundle_cache, repo, python=str(python)
    ) as cluster:
        await cluster.fleets.apply(fleet_configuration(no_sftp, cluster.fleet))
        described = await cluster.fleets.wait_deployed(cluster.fleet, DEPLOY_WAIT)
        host = f"{cluster.fleet}-0"
        assert described.deployed and list(described.pending) == [host]
        assert described.pending[host] == (
            f"{host}: {python} on the host is Python 3.8 (.cpython-38-x86_64-linux-gnu.so), but the agent "
            "needs Python 3.9 or later: install one there, or point FERRY_SSH_PYTHON to it"
        )
    assert not (workdir / "hosts").exists()
