"""Fleets with `nodes` on a real Slurm cluster (docs/backends.md): instances created as Slurm allocations
running Ferry's agent on the compute nodes, reached through the login node, and released when idle."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from cli.backend_offers import backend_offers
from core.backends.slurm import fleet_prefix
from core.configuration import (
    ServiceConfiguration,
    parse_configuration,
)
from store import RunRecord, ServiceReplicaRecord
from testbed.fleets import WAIT, task, until
from tests.slurm.conftest import ALLOCATION_WAIT, NODE, SlurmStack


async def test_a_task_on_an_empty_elastic_fleet_gets_an_allocation_that_is_released_when_idle(
    stack: SlurmStack,
) -> None:
    await stack.api.fleets().apply(stack.fleet_configuration(nodes="0..2", idle_duration="20s"))
    assert stack.our_jobs() == []  # `nodes: 0..`: nothing is created before a run needs it

    run = await stack.api.submit(
        task(["echo ran"], resources=NODE, fleets=[stack.fleet]),
        repo_dir=stack.repo,
        run_name=f"t-{uuid.uuid4().hex[:6]}",
    )
    done = await asyncio.wait_for(stack.api.wait(run.run_name), ALLOCATION_WAIT)
    assert done.status == "done", [str(e) for e in stack.api.all_events(done) if e.name == "exception"]
    # On the node of the fleet's first allocation, which is what the allocation gives (1 CPU, 1 GB: the
    # agent is the allocation's task, and says what Slurm gives it), not the node's 2 CPUs and 2000 MB.
    [job] = stack.api.store.list_job_submissions(done.id)
    assert job.instance_name == f"{stack.fleet}-g1-0"
    assert stack.api.logs(done)[0] == b"ran\n"
    [instance] = [i for i in stack.api.store.list_instances(stack.api.project, stack.fleet)]
    assert json.loads(instance.resources) == {"cpu": 1.0, "memory": 1.0, "gpu": 0}
    # The one allocation it ran on is given back once idle for idle_duration: squeue has none of the fleet's.
    await until("the idle allocation to be released", lambda: not stack.our_jobs(), ALLOCATION_WAIT)
    described = await stack.api.fleets().describe(stack.fleet)
    assert described.instances == []


async def test_a_preempted_allocation_is_an_interruption_and_the_run_recovers_on_a_new_one(
    stack: SlurmStack,
) -> None:
    await stack.api.fleets().apply(
        stack.fleet_configuration(nodes="0..1", spot_policy="spot", idle_duration="5s")
    )
    # Counts its attempts in the shared directory, and runs long enough the first time to be preempted.
    marks = stack.repo / "attempts"
    command = (
        f"echo attempt >> {marks}; echo started $(wc -l < {marks}); [ $(wc -l < {marks}) -gt 1 ] || sleep 120"
    )
    run = await stack.api.submit(
        task(
            [command],
            resources=NODE,
            fleets=[stack.fleet],
            retry={"on_events": ["interruption"], "duration": "10m"},
        ),
        repo_dir=stack.repo,
        run_name=f"p-{uuid.uuid4().hex[:6]}",
    )
    await until("the first attempt to run", lambda: marks.exists(), ALLOCATION_WAIT)
    [first] = stack.our_jobs()
    # A job of the higher partition takes every node: Slurm preempts the fleet's allocation.
    preemptor = stack.slurm.slurm(
        "sbatch",
        "--parsable",
        "-o",
        "/dev/null",
        "-p",
        "high",
        "-N",
        str(len(stack.slurm.node_names)),
        "--wrap",
        "sleep 15",
    ).strip()
    try:
        done = await asyncio.wait_for(stack.api.wait(run.run_name), ALLOCATION_WAIT)
    finally:
        stack.slurm.slurm("scancel", preemptor)
    assert done.status == "done", [str(e) for e in stack.api.all_events(done)][-8:]
    jobs = stack.api.store.list_job_submissions(done.id)
    assert [(j.submission_num, j.status, j.termination_reason) for j in jobs] == [
        (0, "failed", "interrupted_by_no_capacity"),
        (1, "done", "done_by_runner"),
    ]
    # Its own allocation each time, one after the other; the eventlog names the preemption.
    assert jobs[0].instance_name == f"{stack.fleet}-g1-0" and jobs[1].instance_name == f"{stack.fleet}-g2-0"
    notes = [str(e.context.get("note", "")) for e in stack.api.all_events(done)]
    assert any(f"its Slurm allocation {first['id']} on backend slurm was preempted" in n for n in notes), (
        notes
    )
    assert marks.read_text().splitlines() == ["attempt", "attempt"]  # never two at once: two runs in turn
    assert stack.api.logs(done)[0] == b"started 2\n"


async def test_a_two_node_task_gets_both_nodes_of_one_allocation(stack: SlurmStack) -> None:
    await stack.api.fleets().apply(
        stack.fleet_configuration(nodes="0..2", placement="cluster", idle_duration="1s")
    )
    command = "echo rank=$DSTACK_NODE_RANK nodes=$DSTACK_NODES_NUM master=$DSTACK_MASTER_NODE_IP"
    run = await stack.api.submit(
        task([command], resources=NODE, nodes=2, fleets=[stack.fleet]),
        repo_dir=stack.repo,
        run_name=f"g-{uuid.uuid4().hex[:6]}",
    )
    done = await asyncio.wait_for(stack.api.wait(run.run_name), ALLOCATION_WAIT)
    assert done.status == "done", [str(e) for e in stack.api.all_events(done) if e.name == "exception"]
    jobs = stack.api.store.list_job_submissions(done.id)
    # One allocation of two nodes (g1), a node each; the master is node 0's address, as Slurm knows it.
    assert sorted(j.instance_name or "" for j in jobs) == [f"{stack.fleet}-g1-0", f"{stack.fleet}-g1-1"]
    said = [dict(w.split("=") for w in stack.api.logs(done, job=j.job_num)[0].decode().split()) for j in jobs]
    addresses = dict(stack.slurm.nodes)
    assert sorted(s["rank"] for s in said) == ["0", "1"]
    assert {s["nodes"] for s in said} == {"2"}
    assert len({s["master"] for s in said}) == 1 and said[0]["master"] in addresses.values()


async def test_a_fleet_grows_to_max_under_queued_tasks_and_shrinks_back_to_min(stack: SlurmStack) -> None:
    await stack.api.fleets().apply(stack.fleet_configuration(nodes="1..3", idle_duration="2s"))
    await until(
        "MIN's allocation to run",
        lambda: [j for j in stack.our_jobs() if j["state"] == "RUNNING"],
        ALLOCATION_WAIT,
    )
    gate = stack.repo / "gate"
    runs = [
        await stack.api.submit(
            task([f"while [ ! -e {gate} ]; do sleep 0.2; done"], resources=NODE, fleets=[stack.fleet]),
            repo_dir=stack.repo,
            run_name=f"q{k}-{uuid.uuid4().hex[:6]}",
        )
        for k in range(3)
    ]
    # Three tasks of a whole node each: the fleet grows to its MAX of three allocations, one node each.
    await until(
        "three allocations to run",
        lambda: len([j for j in stack.our_jobs() if j["state"] == "RUNNING"]) == 3,
        ALLOCATION_WAIT,
    )
    gate.touch()
    for run in runs:
        done = await asyncio.wait_for(stack.api.wait(run.run_name), ALLOCATION_WAIT)
        assert done.status == "done"
    # Idle again: back to MIN, one allocation, which stays.
    await until("the fleet to shrink to MIN", lambda: len(stack.our_jobs()) == 1, ALLOCATION_WAIT)
    described = await stack.api.fleets().describe(stack.fleet)
    assert [i.status for i in described.instances] == ["ready"]


async def test_a_fleet_starts_with_target_allocations_and_keeps_min(stack: SlurmStack) -> None:
    """dstack's `nodes: {min: 1, target: 2, max: 3}`: two allocations at creation, with no run asking;
    the one above MIN goes once idle (docs/backends.md#elastic-fleets)."""
    conf = stack.fleet_configuration(nodes={"min": 1, "target": 2, "max": 3}, idle_duration="2s")
    assert conf.unsupported_fields() == []
    await stack.api.fleets().apply(conf)
    await until(
        "TARGET's two allocations to run",
        lambda: len([j for j in stack.our_jobs() if j["state"] == "RUNNING"]) == 2,
        ALLOCATION_WAIT,
    )
    await until("the fleet to shrink to MIN", lambda: len(stack.our_jobs()) == 1, ALLOCATION_WAIT)
    described = await stack.api.fleets().describe(stack.fleet)
    assert [i.status for i in described.instances] == ["ready"]


async def test_an_allocation_slurm_refuses_fails_the_run_with_slurms_reason(stack: SlurmStack) -> None:
    big = {"cpu": 1, "memory": "5GB", "disk": "0GB.."}  # the nodes have 2000 MB
    await stack.api.fleets().apply(stack.fleet_configuration(nodes="0..1", resources=big))
    run = await stack.api.submit(
        task(["true"], resources=big, fleets=[stack.fleet]),
        repo_dir=stack.repo,
        run_name=f"r-{uuid.uuid4().hex[:6]}",
    )
    done = await asyncio.wait_for(stack.api.wait(run.run_name), ALLOCATION_WAIT)
    assert done.status == "failed"
    [job] = stack.api.store.list_job_submissions(done.id)
    assert job.termination_reason == "failed_to_start_due_to_no_capacity"
    notes = [str(e.context.get("note", "")) for e in stack.api.all_events(done) if e.name == "exception"]
    assert notes == [
        "backend slurm cannot create 1 instance(s): sbatch: error: Memory specification can not be "
        "satisfied sbatch: error: Batch job submission failed: Requested node configuration is not available"
    ]
    assert stack.our_jobs() == []


async def test_a_worker_restarted_while_the_allocation_is_made_creates_it_once_and_reaches_its_agent(
    stack: SlurmStack,
) -> None:
    gate, run = await gated_run(stack, "w")
    # The worker stops as soon as Slurm has the allocation: the fleet asked, the answer may be lost.
    await until("the allocation to be submitted", lambda: stack.our_jobs(), ALLOCATION_WAIT)
    await stack.restart_worker()
    await until("the run to be running", lambda: _running(stack, run.run_name), ALLOCATION_WAIT)
    # The new worker reached the agent it never started (the job's watch through it), and made no
    # second allocation: one Slurm job of the fleet's, ever.
    await stack.restart_worker()
    gate.touch()
    done = await asyncio.wait_for(stack.api.wait(run.run_name), ALLOCATION_WAIT)
    assert done.status == "done", [str(e) for e in stack.api.all_events(done) if e.name == "exception"]
    assert stack.api.logs(done)[0] == b"through\n"
    prefix = fleet_prefix(stack.api.project, stack.fleet)
    assert len([j for j in stack.slurm.jobs() if j["name"].startswith(prefix)]) == 1


async def gated_run(stack: SlurmStack, tag: str) -> tuple[Path, RunRecord]:
    """A `nodes: 0..1` fleet and a run whose task waits for its gate (a file), then says `through`."""
    await stack.api.fleets().apply(stack.fleet_configuration(nodes="0..1", idle_duration="1s"))
    gate = stack.repo / f"gate-{tag}"
    command = f"while [ ! -e {gate} ]; do sleep 0.2; done; echo through"
    run = await stack.api.submit(
        task([command], resources=NODE, fleets=[stack.fleet]),
        repo_dir=stack.repo,
        run_name=f"{tag}-{uuid.uuid4().hex[:6]}",
    )
    return gate, run


async def _running(stack: SlurmStack, run_name: str) -> bool:
    return (await stack.api.get_run(run_name)).status == "running"


async def test_the_login_node_unreachable_makes_the_instances_unreachable_not_failed(
    stack: SlurmStack,
) -> None:
    gate, run = await gated_run(stack, "u")
    await until("the run to be running", lambda: _running(stack, run.run_name), ALLOCATION_WAIT)
    stack.slurm.cut_login()
    try:
        await until("the instance to be unreachable", lambda: _instance_status(stack, "unreachable"), WAIT)
        assert await _running(stack, run.run_name)  # its job runs on: Slurm still has the allocation
    finally:
        stack.slurm.heal_login()
    await until("the instance to be ready again", lambda: _instance_status(stack, "ready"), WAIT)
    gate.touch()
    done = await asyncio.wait_for(stack.api.wait(run.run_name), ALLOCATION_WAIT)
    assert done.status == "done", [str(e) for e in stack.api.all_events(done) if e.name == "exception"]
    assert stack.api.logs(done)[0] == b"through\n"


async def _instance_status(stack: SlurmStack, status: str) -> bool:
    described = await stack.api.fleets().describe(stack.fleet)
    return [i.status for i in described.instances] == [status]


async def test_ps_says_what_slurm_keeps_a_pending_allocation_for(stack: SlurmStack) -> None:
    await stack.api.fleets().apply(stack.fleet_configuration(nodes="0..1", idle_duration="1s"))
    async with holding_every_node(stack, "high"):
        run = await stack.api.submit(
            task(["true"], resources=NODE, fleets=[stack.fleet]),
            repo_dir=stack.repo,
            run_name=f"s-{uuid.uuid4().hex[:6]}",
        )
        said = await until(
            "ferry ps to say why it waits", lambda: _waiting_words(stack, run.id), ALLOCATION_WAIT
        )
        assert said.startswith("waiting for capacity: Slurm job "), said
    done = await asyncio.wait_for(stack.api.wait(run.run_name), ALLOCATION_WAIT)
    assert done.status == "done"


def _waiting_words(stack: SlurmStack, run_id: str) -> str | None:
    jobs = stack.api.store.list_job_submissions(run_id)
    words = [j.status_message or "" for j in jobs]
    # "Slurm job N: pending" until the fleet's watch has heard Slurm's reason, which may be `None: Slurm
    # has not looked at it yet` before its scheduler has
    said = ("Resources: the nodes it needs are busy", "Priority: jobs of higher priority are ahead of it")
    return next((w for w in words if "Slurm job" in w and w.endswith(said)), None)


async def test_spot_policy_auto_takes_the_preemptible_partition_and_falls_back_when_it_is_full(
    stack: SlurmStack,
) -> None:
    await stack.api.fleets().apply(
        stack.fleet_configuration(nodes="0..2", spot_policy="auto", idle_duration="1s")
    )
    first = await stack.api.submit(
        task(["true"], resources=NODE, fleets=[stack.fleet]),
        repo_dir=stack.repo,
        run_name=f"a-{uuid.uuid4().hex[:6]}",
    )
    assert (await asyncio.wait_for(stack.api.wait(first.run_name), ALLOCATION_WAIT)).status == "done"
    # Free nodes: the preemptible partition, asked first.
    prefix = fleet_prefix(stack.api.project, stack.fleet)
    [g1] = [j for j in stack.slurm.jobs() if j["name"] == f"{prefix}g1"]
    assert stack.slurm.job(g1["id"])["Partition"] == "low"
    # Someone else's job fills the preemptible partition: the next allocation goes where it can start now.
    async with holding_every_node(stack, "low"):
        second = await stack.api.submit(
            task(["true"], resources=NODE, fleets=[stack.fleet]),
            repo_dir=stack.repo,
            run_name=f"b-{uuid.uuid4().hex[:6]}",
        )
        assert (await asyncio.wait_for(stack.api.wait(second.run_name), ALLOCATION_WAIT)).status == "done"
    [g2] = [j for j in stack.slurm.jobs() if j["name"] == f"{prefix}g2"]
    assert stack.slurm.job(g2["id"])["Partition"] == "high"


async def test_offers_say_what_the_backend_could_give_now_later_or_never(
    stack: SlurmStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FERRY_SSH_KNOWN_HOSTS", "none")  # the CLI's side: the login host's key is the run's
    await stack.api.fleets().apply(stack.fleet_configuration(nodes="0..2", spot_policy="auto"))
    offers = await backend_offers(stack.api.store, stack.api.project, stack.fleet, 1)
    assert [(o.partition, o.preemptible, o.fit) for o in offers] == [
        ("low", True, "now"),
        ("high", False, "now"),
    ]
    async with holding_every_node(stack, "high"):
        offers = await backend_offers(stack.api.store, stack.api.project, stack.fleet, 1)
        assert [(o.partition, o.fit) for o in offers] == [("low", "when free"), ("high", "when free")]
        assert all(o.reasons[0].startswith("Slurm would start it at about ") for o in offers)
        # Three nodes of the fleet's shape fit the cluster; four never do: Slurm's words say why.
        offers = await backend_offers(stack.api.store, stack.api.project, stack.fleet, 4)
        assert [(o.partition, o.fit) for o in offers] == [("low", "never"), ("high", "never")]
        assert all("Requested node configuration is not available" in o.reasons[0] for o in offers), offers
    assert stack.our_jobs() == []  # an offer submits nothing


@asynccontextmanager
async def holding_every_node(stack: SlurmStack, partition: str) -> AsyncIterator[None]:
    """Someone else's job on every node of the cluster, in `partition`, while the block runs."""
    nodes = str(len(stack.slurm.node_names))
    job = stack.slurm.slurm(
        "sbatch", "--parsable", "-o", "/dev/null", "-p", partition, "-N", nodes, "--wrap", "sleep 300"
    )
    try:
        await until("the blocker to run", lambda: stack.slurm.job(job.strip())["JobState"] == "RUNNING", WAIT)
        yield
    finally:
        stack.slurm.slurm("scancel", job.strip())


async def test_a_service_replica_on_a_slurm_node_is_probed_ready_and_serves(stack: SlurmStack) -> None:
    """Where the worker and the proxy can route to the compute nodes (here: the root namespace is on their
    bridge), a replica on a node serves at the URL the proxies forward to. Through the login node they
    cannot yet (docs/backends.md#not-done-yet)."""
    await stack.api.fleets().apply(stack.fleet_configuration(nodes="0..1", idle_duration="1s"))
    serve = "cd $(mktemp -d) && echo on-slurm > index.html && exec python3 -m http.server 8000"
    conf = parse_configuration(
        {
            "type": "service",
            "port": 8000,
            "auth": False,
            "commands": [serve],
            "resources": NODE,
            "fleets": [stack.fleet],
        }
    )
    assert isinstance(conf, ServiceConfiguration)
    record = await stack.api.submit(conf, repo_dir=stack.repo, run_name=f"web-{uuid.uuid4().hex[:4]}")
    try:

        async def ready() -> ServiceReplicaRecord | None:
            replicas = stack.api.store.list_service_replicas([record.id])
            return next((r for r in replicas if r.state == "ready"), None)

        replica = await until("the replica to be probed ready", ready, ALLOCATION_WAIT)
        [job] = stack.api.store.list_job_submissions(record.id)
        assert job.instance_name == f"{stack.fleet}-g1-0"
        assert replica.url.startswith(
            f"http://{dict(stack.slurm.nodes)[stack.slurm.node_names[0]].rsplit('.', 1)[0]}."
        )
        async with httpx.AsyncClient() as http:
            answer = await http.get(replica.url, timeout=10)
        assert (answer.status_code, answer.text.strip()) == (200, "on-slurm")
    finally:
        await stack.api.stop(record.run_name, abort=True)
        await asyncio.wait_for(stack.api.wait(record.run_name), ALLOCATION_WAIT)
