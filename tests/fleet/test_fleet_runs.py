"""Runs on an SSH fleet of three real `sshd` hosts in network namespaces: a real dev server, a worker with
its SSH pool, the agents deployed over SSH on the distribution's Python, the fleet's scheduler.
Multi-node placement and addresses, priority under contention, gangs, a host's agent killed, a host lost
and one that comes back; at the end of each test every instance is idle (no capacity leaked) and the
fleet is deleted. The host-loss test kills a host for good, so it comes last."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from activities.fleet import InstanceResolver
from activities.instances import InstanceDirectory
from activities.ssh import HostPool
from cli.api import FerryError
from core.fleets.placement import InstanceStatus
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from core.wire.agent_api import AGENT_SERVICE_NAME
from store import RunRecord
from testbed.fleets import DEPLOY_WAIT, WAIT, Cluster, fleet_configuration, task, until

RETRY_ON_INTERRUPTION = {"on_events": ["interruption"], "duration": "1h"}


def waiter(tmp_path: Path, name: str) -> list[str]:
    """Commands that run until the test creates `name` (the hosts share this filesystem)."""
    gate = tmp_path / name
    return [f"echo {name} on $(hostname)", f"while [ ! -e {gate} ]; do sleep 0.05; done"]


async def running(cluster: Cluster, record: RunRecord, job: int = 0) -> bool:
    return cluster.status(record, job) == JobStatus.RUNNING


async def waiting(cluster: Cluster, record: RunRecord, job: int = 0) -> bool:
    found = cluster.job(record, job)
    return found is not None and found.status == JobStatus.SUBMITTED and found.status_message is not None


async def test_a_two_node_task_runs_across_hosts_with_the_masters_address(cluster: Cluster) -> None:
    await cluster.apply()
    show = "echo master=$FERRY_MASTER_NODE_IP host=$(hostname) ips=$(echo $DSTACK_NODES_IPS | tr ' ' ,)"
    conf = task([show], nodes=2)
    final = await cluster.finished(await cluster.submit(conf, "pair"))
    assert final.status == RunStatus.DONE
    jobs = cluster.jobs(final)
    logs = [
        dict(w.split("=") for w in cluster.api.logs(final, job=j.job_num)[0].decode().split()) for j in jobs
    ]
    master = cluster.address_of(jobs[0].instance_name)  # node 0's host, as the scheduler chose it
    assert master in {host.address for host in cluster.network.hosts}
    assert [log["master"] for log in logs] == [master, master]
    assert logs[0]["host"] != logs[1]["host"] and jobs[0].instance_name != jobs[1].instance_name
    assert {log["host"] for log in logs} <= {host.hostname for host in cluster.network.hosts}
    assert logs[0]["ips"] == logs[1]["ips"] == f"{master},{cluster.address_of(jobs[1].instance_name)}"
    await cluster.check_idle()


async def test_instances_pin_a_run_to_the_hosts_it_names(cluster: Cluster) -> None:
    """dstack's `instances` (docs/fleets.md#pinned-instances): by a fleet's instance number, by address;
    one no host is gets the never-fits line, and the run fails with it rather than wait."""
    await cluster.apply()
    by_number = task(["hostname"], instances=[{"fleet": cluster.fleet, "instance": 2}])
    final = await cluster.finished(await cluster.submit(by_number, "pin-number"))
    assert final.status == RunStatus.DONE
    assert [j.instance_name for j in cluster.jobs(final)] == [f"{cluster.fleet}-2"]
    address = cluster.network.hosts[1].address
    by_address = task(["hostname"], instances=[{"hostname": address}])
    final = await cluster.finished(await cluster.submit(by_address, "pin-address"))
    assert final.status == RunStatus.DONE
    assert [cluster.address_of(j.instance_name) for j in cluster.jobs(final)] == [address]
    nowhere = task(["hostname"], instances=["no-such-host"])
    final = await cluster.finished(await cluster.submit(nowhere, "pin-nowhere"))
    assert final.status == RunStatus.FAILED
    [job] = cluster.jobs(final)
    said = f"{job.status_message} {job.termination_message}"
    assert "not one of the run's `instances` (no-such-host)" in said, said
    await cluster.check_idle()


async def test_placement_cluster_takes_hosts_that_share_a_network(cluster: Cluster) -> None:
    """`placement: cluster` (docs/fleets.md#cluster-placement): each host reaches the others on the test
    network directly, so the fleet deploys, each at its address there, and a two-node task gets them."""
    plain = fleet_configuration(cluster.network, cluster.fleet)
    conf = plain.model_validate({**plain.model_dump(exclude_unset=True), "placement": "cluster"})
    assert conf.unsupported_fields() == []
    await cluster.fleets.apply(conf)
    described = await cluster.fleets.wait_deployed(cluster.fleet, DEPLOY_WAIT)
    assert described.deployed and not described.pending, described.pending
    addresses = {host.address for host in cluster.network.hosts}
    # The fleet's records reach the store a moment after its description says deployed (a CI run read it
    # in between once): its instances, as the store has them, once it has them all.
    names = [i.name for i in described.instances]
    await until("the instances in the store", lambda: all(cluster.api.store.find_instance(n) for n in names))
    assert {cluster.address_of(name) for name in names} == addresses
    show = "echo master=$FERRY_MASTER_NODE_IP ips=$(echo $DSTACK_NODES_IPS | tr ' ' ,)"
    final = await cluster.finished(await cluster.submit(task([show], nodes=2), "cluster-pair"))
    assert final.status == RunStatus.DONE
    said = cluster.api.logs(final)[0].decode().split()
    assert said[0].removeprefix("master=") in addresses
    await cluster.check_idle()


async def test_placement_cluster_refuses_hosts_outside_its_network(cluster: Cluster) -> None:
    """`ssh_config.network` that no host is on: each host's deployment fails, saying so in one line."""
    plain = fleet_configuration(cluster.network, cluster.fleet)
    data = plain.model_dump(exclude_unset=True)
    data["ssh_config"] = {**data["ssh_config"], "network": "192.168.77.0/24"}
    conf = plain.model_validate({**data, "placement": "cluster"})
    await cluster.fleets.apply(conf)
    described = await cluster.fleets.wait_deployed(cluster.fleet, DEPLOY_WAIT)
    assert described.deployed and not described.instances
    assert sorted(described.pending) == [f"{cluster.fleet}-{k}" for k in range(3)]
    hosts = cluster.network.hosts
    said = (
        f"placement: cluster: {cluster.fleet}-0 reaches {hosts[1].address} from {hosts[0].address}, which "
        "is not in ssh_config.network 192.168.77.0/24"
    )
    assert said in described.pending[f"{cluster.fleet}-0"], described.pending


async def test_a_higher_priority_is_placed_first_and_set_priority_reorders(
    cluster: Cluster, tmp_path: Path
) -> None:
    await cluster.apply(blocks=1)
    fillers = [await cluster.submit(task(waiter(tmp_path, f"f{k}")), f"filler-{k}") for k in range(3)]
    for filler in fillers:
        await until("the fillers to run", lambda f=filler: running(cluster, f))
    low = await cluster.submit(task(waiter(tmp_path, "low"), priority=10), "low")
    high = await cluster.submit(task(waiter(tmp_path, "high"), priority=50), "high")
    for run in (low, high):
        await until("both to wait for capacity", lambda r=run: waiting(cluster, r))
    assert cluster.job(low) is not None and cluster.job(low).status_message == "waiting for capacity"  # type: ignore[union-attr]
    described = await cluster.fleets.describe(cluster.fleet)
    assert [q.priority for q in described.queue] == [50, 10]

    (tmp_path / "f0").touch()
    await until("the high-priority run to start", lambda: running(cluster, high))
    assert cluster.status(low) == JobStatus.SUBMITTED

    later = await cluster.submit(task(waiter(tmp_path, "later"), priority=5), "later")
    await until("the later run to wait", lambda: waiting(cluster, later))
    await cluster.fleets.set_priority("later", 60)
    await until(
        "set-priority to reorder the queue",
        lambda: _queue_priorities(cluster, [60, 10]),
    )
    (tmp_path / "f1").touch()
    await until("the reprioritised run to start", lambda: running(cluster, later))
    assert cluster.status(low) == JobStatus.SUBMITTED

    for gate in ("f2", "high", "later", "low"):
        (tmp_path / gate).touch()
    for run in [*fillers, low, high, later]:
        assert (await cluster.finished(run)).status == RunStatus.DONE
    assert cluster.api.store.find_run(cluster.api.project, "later").priority == 60  # type: ignore[union-attr]
    await cluster.check_idle()


async def _queue_priorities(cluster: Cluster, expected: list[int]) -> bool:
    described = await cluster.fleets.describe(cluster.fleet)
    return [q.priority for q in described.queue] == expected


async def test_a_gang_is_placed_whole_or_not_at_all(cluster: Cluster, tmp_path: Path) -> None:
    await cluster.apply(blocks=1)
    busy = await cluster.submit(task(waiter(tmp_path, "busy")), "busy")
    await until("one host to be busy", lambda: running(cluster, busy))

    started = time.monotonic()
    too_big = await cluster.finished(await cluster.submit(task(["true"], nodes=4), "four"))
    print(f"never_fits_to_failed_s: {time.monotonic() - started:.2f}")
    assert (too_big.status, too_big.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    reasons = {j.termination_reason for j in cluster.jobs(too_big)}
    assert reasons == {JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY}
    assert "4 nodes need distinct instances, 3 could hold them" in (
        cluster.jobs(too_big)[0].termination_message or ""
    )

    gang = await cluster.submit(task(["echo rank $FERRY_NODE_RANK on $(hostname)"], nodes=3), "gang")
    for job in range(3):
        await until("every node to wait", lambda j=job: waiting(cluster, gang, j))
    (tmp_path / "busy").touch()
    freed = (await cluster.finished(busy)).finished_at
    final = await cluster.finished(gang)
    assert final.status == RunStatus.DONE
    jobs = cluster.jobs(final)
    assert len({j.instance_name for j in jobs}) == 3
    allocs = [e for j in jobs for e in cluster.api.job_events(final, j.id) if e.name == "alloc"]
    assert len(allocs) == 3 and freed is not None
    # No node was placed while a host was busy: the three went together once it was free.
    assert all(e.timestamp >= freed - 1.0 for e in allocs)
    await cluster.check_idle()


async def test_a_host_that_comes_back_returns_to_service(cluster: Cluster) -> None:
    await cluster.apply()
    lost = await cluster.lose_and_recover(3)
    conf = task(["hostname"], nodes=3)
    final = await cluster.finished(await cluster.submit(conf, "everywhere"))
    assert final.status == RunStatus.DONE
    assert lost in {j.instance_name for j in cluster.jobs(final)}
    await cluster.check_idle()


async def test_fleet_list_reapply_and_a_worker_that_finds_hosts_in_the_store(cluster: Cluster) -> None:
    await cluster.apply(blocks=2)
    await until("the store to show the instances", lambda: len(cluster.fleets.list()[0][1]) == 3)
    [(fleet, instances)] = cluster.fleets.list()
    assert (fleet.name, fleet.backend, fleet.status) == (cluster.fleet, "ssh", "active")
    assert [i.name for i in instances] == [f"{cluster.fleet}-{k}" for k in range(3)]
    assert all(i.blocks == 2 and i.busy_blocks == 0 and i.status == "ready" for i in instances)
    assert {i.address for i in instances} == {host.address for host in cluster.network.hosts}

    same = fleet_configuration(cluster.network, cluster.fleet, blocks=2)
    assert (await cluster.fleets.apply(same))[1] is False  # applied again: unchanged
    with pytest.raises(FerryError, match="exists with another configuration"):
        await cluster.fleets.apply(fleet_configuration(cluster.network, cluster.fleet, blocks=1))

    # A worker that did not deploy the hosts (started later) reaches them by name, through the store.
    other = InstanceDirectory(HostPool(cluster.options))
    assert other.pool is not None
    other.pool.on_client = other.add
    other.set_resolver(InstanceResolver(other, cluster.api.store))
    try:
        client = await other.resolve(f"{cluster.fleet}-1")
        assert (await client.healthcheck()).service == AGENT_SERVICE_NAME
    finally:
        await other.aclose()


async def test_a_hosts_agent_killed_mid_job_is_started_again_and_the_job_ends_done(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The agent on the job's host is SIGKILLed: its supervisor starts it again (agent/supervisor.py), the
    worker reaches it through the same tunnel, the host is not lost, and the job, which kept running, ends
    DONE with its whole log, in its first submission."""
    await cluster.apply()
    record = await cluster.submit(task([*waiter(tmp_path, "go"), "echo after"]), "outlives-its-agent")
    await until("the job to print", lambda: b"go on " in cluster.api.logs(record)[0])
    job = cluster.job(record)
    assert job is not None
    address = cluster.address_of(job.instance_name)
    state_file = Path(cluster.options.remote_dir.format(hostname=address)) / "supervisor.json"
    killed = json.loads(state_file.read_text())
    os.kill(killed["pid"], signal.SIGKILL)
    await until("the agent to be started again", lambda: _started_again(state_file, killed["pid"]))
    (tmp_path / "go").touch()
    final = await cluster.finished(record)
    assert (final.status, final.termination_reason) == (RunStatus.DONE, RunTerminationReason.ALL_JOBS_DONE)
    [done] = cluster.jobs(final)
    assert (done.submission_num, done.status, done.exit_status) == (0, JobStatus.DONE, 0)
    host = next(h.hostname for h in cluster.network.hosts if h.address == address)
    assert cluster.api.logs(final)[0] == f"go on {host}\nafter\n".encode()
    described = await cluster.check_idle()
    assert all(i.status == InstanceStatus.READY for i in described.instances)


def _started_again(state_file: Path, killed: int) -> bool:
    state = json.loads(state_file.read_text())
    return bool(state["ready"]) and state["pid"] not in (0, killed)


async def test_a_lost_host_fails_its_job_which_runs_again_elsewhere(cluster: Cluster, tmp_path: Path) -> None:
    """The job's host is killed (its namespace and every process in it): the job fails with
    INSTANCE_UNREACHABLE, the run retries on `interruption` and its new submission runs on another host;
    both submissions' logs are kept. Prints the measured times (not asserted: bench/README.md)."""
    await cluster.apply()
    marker = tmp_path / "ran-once"
    command = (
        f"if [ -e {marker} ]; then echo second on $(hostname); else touch {marker}; echo first; sleep 600; fi"
    )
    record = await cluster.submit(task([command], retry=RETRY_ON_INTERRUPTION), "survivor")
    await until("the first submission to print", lambda: b"first" in cluster.api.logs(record)[0])
    first = cluster.job(record)
    assert first is not None
    killed = cluster.host_index(first.instance_name)

    lost_at, lost_clock = time.monotonic(), time.time()
    cluster.network.kill_host(killed)
    failed = await until("the job to fail", lambda: _failed(cluster, record), limit=30)
    unreachable_after = time.monotonic() - lost_at
    print(f"host_loss_to_unreachable_s: {unreachable_after:.2f}")
    assert failed.termination_reason == JobTerminationReason.INSTANCE_UNREACHABLE

    final = await cluster.finished(record)
    assert (final.status, final.termination_reason) == (RunStatus.DONE, RunTerminationReason.ALL_JOBS_DONE)
    second = cluster.job(final, submission=1)
    assert second is not None and second.status == JobStatus.DONE
    assert cluster.host_index(second.instance_name) != killed
    [start] = [e for e in cluster.api.job_events(final, second.id) if e.name == "start"]
    print(f"host_loss_to_new_submission_running_s: {start.timestamp - lost_clock:.2f}")
    assert cluster.api.store.read_log(first.id)[0] == b"first\n"
    assert cluster.api.store.read_log(second.id)[0].startswith(b"second on ")

    described = await cluster.check_idle()
    statuses = {i.name: i.status for i in described.instances}
    assert statuses[f"{cluster.fleet}-{killed - 1}"] == InstanceStatus.UNREACHABLE
    deleted = await cluster.fleets.delete(cluster.fleet, wait=WAIT)
    assert deleted is not None and deleted.deleting
    assert cluster.api.store.list_instances(cluster.api.project, cluster.fleet) == []


async def _failed(cluster: Cluster, record: RunRecord) -> object:
    job = cluster.job(record)
    return job if job is not None and job.status == JobStatus.FAILED else None
