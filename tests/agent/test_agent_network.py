"""Per-task network isolation: isolated jobs listen on the same port, each in its own namespace, reached
at its task's address; removal leaves no namespace, veth or masquerade rule; host tasks are as before."""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from agent_harness import (
    AgentProcess,
    eventually,
    free_port,
    isolation_unavailable,
    new_id,
    start_agent,
    start_job,
    stop_agent,
    wait_terminated,
)

from activities.agent_client import AgentClient, AgentError
from agent import network, network_owners
from core.status import JobTerminationReason
from core.wire.agent_api import JobSpec, TaskInfo, TaskStatus, TaskSubmitRequest


@pytest.fixture(scope="module")
def isolation() -> None:
    reason = isolation_unavailable()
    if reason is not None:
        pytest.skip(reason)


def run(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def record_of(data_dir: Path, task_id: str) -> dict[str, object]:
    record: dict[str, object] = json.loads((data_dir / "tasks" / task_id / "task.json").read_text())
    return record


def assert_network_gone(netns: str, subnet: str) -> None:
    veth = network.host_veth(netns)
    assert not network.namespace_exists(netns)
    assert netns not in run("ip", "netns", "list")
    assert veth not in run("ip", "link")
    host_side = ipaddress.IPv4Network(subnet).network_address + 1
    assert f"inet {host_side}/" not in run("ip", "-4", "addr")
    if shutil.which("nft"):
        ruleset = run("nft", "list", "ruleset")
        assert veth not in ruleset and subnet not in ruleset
    if shutil.which("iptables"):
        assert veth not in run("iptables", "-t", "nat", "-S")


def cleanup_namespaces(data_dir: Path) -> None:
    """Whatever a failed test left: every namespace the agent's records name."""
    for record_path in (data_dir / "tasks").glob("*/task.json"):
        netns = json.loads(record_path.read_text()).get("netns")
        if netns:
            network.teardown(netns)


@pytest.fixture
def own_agent(workspace: Path) -> Iterator[list[AgentProcess]]:
    """A dedicated agent, in a list so that the test may replace it by a restarted one."""
    agents = [start_agent(workspace / "agent")]
    yield agents
    stop_agent(agents[-1])
    cleanup_namespaces(agents[-1].data_dir)


@pytest.fixture
def shared_isolation(isolation: None, shared_agent: AgentProcess) -> Iterator[None]:
    """For the tests on the shared agent: no namespace outlives them, even when they fail."""
    yield
    cleanup_namespaces(shared_agent.data_dir)


async def fetch(address: str, path: str) -> str | None:
    # trust_env=False: no proxy from the environment; the request goes to the namespace only.
    async with httpx.AsyncClient(trust_env=False, timeout=2) as http:
        try:
            response = await http.get(f"http://{address}:8100/{path}")
        except httpx.HTTPError:
            return None
    return response.text if response.status_code == 200 else None


def http_server(task_id: str) -> list[str]:
    """Serve a directory holding a file named after the task, saying which task it is."""
    return [
        f"mkdir -p site && echo 'served by {task_id}' > site/{task_id}.txt",
        f"exec {shlex.quote(sys.executable)} -m http.server 8100 --bind 0.0.0.0 --directory site",
    ]


async def wait_running(client: AgentClient, task_id: str) -> TaskInfo:
    async def probe() -> TaskInfo | None:
        task = await client.get_task(task_id)
        assert task.status != TaskStatus.TERMINATED, task
        return task if task.status == TaskStatus.RUNNING else None

    return await eventually(probe, 15, what=f"task {task_id} running")


def net_namespace_of(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


async def test_isolated_tasks_listen_on_the_same_port(isolation: None, own_agent: list[AgentProcess]) -> None:
    agent = own_agent[0]
    ids = [new_id("iso-a"), new_id("iso-b")]
    async with agent.client() as client:
        for task_id in ids:
            await start_job(
                client,
                http_server(task_id),
                task_id=task_id,
                task_fields={"network": "isolated", "ports": [8100]},
            )
        tasks = {task_id: await wait_running(client, task_id) for task_id in ids}
        for task_id, task in tasks.items():
            assert task.network == "isolated"
            assert task.address is not None and ipaddress.ip_address(task.address) in network.POOL
            assert [(p.container_port, p.host_port) for p in task.ports] == [(8100, 8100)]
            reply = await eventually(lambda t=task, i=task_id: fetch(t.address, f"{i}.txt"), 15)
            assert reply == f"served by {task_id}\n"
            other = next(i for i in ids if i != task_id)
            assert await fetch(task.address, f"{other}.txt") is None  # each answers with its own content
        assert len({task.address for task in tasks.values()}) == 2

    records = {task_id: record_of(agent.data_dir, task_id) for task_id in ids}
    host_ns = net_namespace_of(os.getpid())
    for record in records.values():
        # The recorded pid is the job's wrapper, which nsenter exec'd in place, inside the namespace.
        pid = record["pid"]
        assert isinstance(pid, int)
        assert b"ferry-job" in Path(f"/proc/{pid}/cmdline").read_bytes()
        netns = record["netns"]
        assert isinstance(netns, str) and network.namespace_exists(netns)
        assert net_namespace_of(pid) == os.stat(network.NETNS_DIR / netns).st_ino != host_ns
        if shutil.which("nft") and "no outbound access" not in agent.output():
            assert network.host_veth(netns) in run("nft", "list", "ruleset")

    # An agent killed and restarted on the same data dir finds both jobs, still reachable.
    agent.kill()
    agent = start_agent(agent.data_dir.parent, data_dir=agent.data_dir)
    own_agent.append(agent)
    async with agent.client() as client:
        for task_id, task in tasks.items():
            again = await client.get_task(task_id)
            assert (again.status, again.network, again.address) == (
                TaskStatus.RUNNING,
                "isolated",
                task.address,
            )
            assert task.address is not None
            assert await fetch(task.address, f"{task_id}.txt") == f"served by {task_id}\n"
        for task_id in ids:
            await client.terminate(task_id, timeout=5)
        for task_id in ids:
            assert (await wait_terminated(client, task_id, timeout=15)).status == TaskStatus.TERMINATED
            await client.remove(task_id)

    for task_id, task in tasks.items():
        netns = records[task_id]["netns"]
        assert isinstance(netns, str) and task.address is not None
        subnet = str(ipaddress.ip_network(f"{task.address}/30", strict=False))
        assert_network_gone(netns, subnet)


async def test_host_tasks_keep_port_conflicts(
    shared_isolation: None, shared_agent: AgentProcess, client: AgentClient
) -> None:
    port = free_port()
    host_task = await client.submit_task(TaskSubmitRequest(id=new_id("host"), ports=[port]))
    assert (host_task.network, host_task.address) == ("host", None)
    with pytest.raises(AgentError) as error:
        await client.submit_task(TaskSubmitRequest(id=new_id("host"), ports=[port]))
    assert error.value.status_code == 409 and f"port {port}" in error.value.message

    # Isolated tasks take the port too: neither clashes with the host's task nor with the other.
    isolated = [
        await client.submit_task(TaskSubmitRequest(id=new_id("iso"), ports=[port], network="isolated"))
        for _ in range(2)
    ]
    assert all(task.network == "isolated" and task.address for task in isolated)
    # A retry of the same request is the same task; another network under its id is refused.
    assert (
        await client.submit_task(TaskSubmitRequest(id=isolated[0].id, ports=[port], network="isolated"))
    ).address == isolated[0].address
    with pytest.raises(AgentError) as error:
        await client.submit_task(TaskSubmitRequest(id=isolated[0].id, ports=[port]))
    assert error.value.status_code == 409

    netns = [record_of(shared_agent.data_dir, task.id)["netns"] for task in isolated]
    for task_id in [host_task.id, *(task.id for task in isolated)]:
        await client.terminate(task_id)  # pending: never started, so its namespace goes at once
    for name, task in zip(netns, isolated, strict=True):
        assert isinstance(name, str) and task.address is not None
        assert_network_gone(name, str(ipaddress.ip_network(f"{task.address}/30", strict=False)))
        await client.remove(task.id)
    await client.remove(host_task.id)


FAILING_NETNS_ADD = """#!/bin/sh
if [ "$1 $2" = "netns add" ]; then echo "creating network namespaces is not allowed here" >&2; exit 1; fi
exec {ip} "$@"
"""


async def test_task_runs_on_host_network_when_namespace_creation_fails(
    isolation: None, workspace: Path
) -> None:
    # An `ip` first on the agent's PATH that refuses `ip netns add`, as a confined host would.
    fake_bin = workspace / "bin"
    fake_bin.mkdir()
    real_ip = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin")
    (fake_bin / "ip").write_text(FAILING_NETNS_ADD.format(ip=real_ip))
    (fake_bin / "ip").chmod(0o755)
    agent = start_agent(workspace / "agent", env={"PATH": f"{fake_bin}:{os.environ.get('PATH', '')}"})
    try:
        task_id = new_id("nons")
        port = free_port()
        async with agent.client() as client:
            request = TaskSubmitRequest(id=task_id, network="isolated", ports=[port])
            task = await client.submit_task(request)
            assert (task.network, task.address) == ("host", None)
            assert record_of(agent.data_dir, task_id)["netns"] is None
            assert f"task {task_id} runs on the host's network: it cannot be isolated" in agent.output()
            assert "creating network namespaces is not allowed here" in agent.output()
            # On the host's network, its port is refused to another host task.
            with pytest.raises(AgentError) as error:
                await client.submit_task(TaskSubmitRequest(id=new_id(), ports=[port]))
            assert error.value.status_code == 409
            # And to another isolated one, which cannot be isolated either.
            with pytest.raises(AgentError) as error:
                await client.submit_task(TaskSubmitRequest(id=new_id(), ports=[port], network="isolated"))
            assert error.value.status_code == 409
            assert "network isolation is unavailable" in error.value.message
            assert (await client.submit_task(request)).network == "host"  # a retry: the same task
            await client.terminate(task_id)
            await client.remove(task_id)
    finally:
        stop_agent(agent)
        cleanup_namespaces(agent.data_dir)
    netns = network.namespace_name(f"{agent.data_dir.resolve()}\0{task_id}")
    assert not network.leaves_trace(netns)


def test_isolation_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert network.unavailable_reason() == "the agent does not run as root"
    with pytest.raises(network.NetworkError, match="root"):
        network.setup(network.namespace_name("any"), Path("/nonexistent/task.json"))


def test_names_fit_the_kernel_limits() -> None:
    netns = network.namespace_name("/some/data/dir\0" + "t" * 128)
    assert netns.startswith("ferry-") and len(network.host_veth(netns)) <= 15
    assert netns == network.namespace_name("/some/data/dir\0" + "t" * 128)
    assert netns != network.namespace_name("/other/data/dir\0" + "t" * 128)


async def test_start_fails_when_the_namespace_is_gone(
    shared_isolation: None, shared_agent: AgentProcess, client: AgentClient
) -> None:
    task_id = new_id("gone")
    task = await client.submit_task(TaskSubmitRequest(id=task_id, network="isolated"))
    await client.submit_job(task_id, JobSpec(run_name="test-run", commands=["true"]))
    netns = record_of(shared_agent.data_dir, task_id)["netns"]
    assert isinstance(netns, str) and task.address is not None
    network.teardown(netns)  # as a person, or a reboot with the agent down, would
    await client.run(task_id)
    ended = await wait_terminated(client, task_id, timeout=10)
    assert ended.termination_reason == JobTerminationReason.EXECUTOR_ERROR
    assert f"the task's network namespace {netns} is gone" in (ended.termination_message or "")
    assert_network_gone(netns, str(ipaddress.ip_network(f"{task.address}/30", strict=False)))
    await client.remove(task_id)


async def test_restarted_agent_makes_a_pending_task_namespace_again(
    isolation: None, own_agent: list[AgentProcess]
) -> None:
    agent = own_agent[0]
    task_id = new_id("again")
    async with agent.client() as client:
        await client.submit_task(TaskSubmitRequest(id=task_id, network="isolated", ports=[8100]))
        await client.submit_job(task_id, JobSpec(run_name="test-run", commands=http_server(task_id)))
    netns = record_of(agent.data_dir, task_id)["netns"]
    assert isinstance(netns, str)
    agent.kill()
    network.teardown(netns)  # a reboot while the task waited for its run call
    agent = start_agent(agent.data_dir.parent, data_dir=agent.data_dir)
    own_agent.append(agent)
    assert network.is_intact(netns)
    async with agent.client() as client:
        await client.run(task_id)
        task = await wait_running(client, task_id)
        assert task.network == "isolated" and task.address is not None
        address = task.address
        assert await eventually(lambda: fetch(address, f"{task_id}.txt"), 15) == f"served by {task_id}\n"
        await client.terminate(task_id, timeout=5)
        await wait_terminated(client, task_id, timeout=15)
        await client.remove(task_id)
    assert_network_gone(netns, str(ipaddress.ip_network(f"{address}/30", strict=False)))


def test_abandoned_namespaces_are_swept(isolation: None, tmp_path: Path) -> None:
    """A namespace whose task record is gone (its agent killed, its data dir deleted) is removed by the
    next agent's sweep; one whose record is there, or one just made, is not."""
    kept_record, gone_record = tmp_path / "kept.json", tmp_path / "gone.json"
    kept_record.write_text("{}")
    gone_record.write_text("{}")
    kept, gone = network.namespace_name(f"{tmp_path}\0kept"), network.namespace_name(f"{tmp_path}\0gone")
    try:
        network.setup(kept, kept_record)
        gone_subnet = str(ipaddress.IPv4Interface(network.setup(gone, gone_record).address + "/30").network)
        gone_record.unlink()
        assert gone not in network.sweep_abandoned()  # within its grace: its submission may be writing
        old = time.time() - network_owners.UNOWNED_GRACE - 1
        for netns in (kept, gone):
            os.utime(network_owners.OWNERS_DIR / netns, (old, old))
        removed = network.sweep_abandoned()
        assert gone in removed and kept not in removed
        assert_network_gone(gone, gone_subnet)
        assert not (network_owners.OWNERS_DIR / gone).exists()
        assert network.is_intact(kept)
    finally:
        network.teardown(kept)
        network.teardown(gone)
    assert not (network_owners.OWNERS_DIR / kept).exists()
