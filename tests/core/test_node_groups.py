"""A task's node groups and its `startup_order`, as core decides them (docs/runs.md#node-groups,
docs/runs.md#startup-order): each node's job has its group's commands and resources, the replica is one
gang with each node's own request, addresses are filled in once it is placed, and the nodes that wait
for others are told when those have started."""

from __future__ import annotations

from typing import Any

import pytest

from core.configuration import TaskConfiguration, parse_configuration
from core.eventlog import Event
from core.jobs.state_machine import apply_job_event
from core.jobs.transitions import job_status_message, peers_memo, start_job
from core.run_types import configurator_for
from core.runs import startup
from core.runs.effects import PeersStarted, StartJob
from core.runs.lifecycle import submit_run
from core.runs.submissions import job_input, replica_enqueue
from core.status import JobStatus
from core.wire.agent_api import ClusterInfo
from core.wire.job_messages import Placement
from tests.core.test_run_lifecycle import news, run_input, step

S = JobStatus
GROUPS = {
    "groups": [
        {"name": "head", "commands": ["ray start --head"], "resources": {"cpu": 2, "memory": "1GB"}},
        {
            "nodes": 2,
            "commands": [
                "ray start --address=${{ groups[0].nodes[0].IP_ADDRESS }}:6379"
                " # ${{ groups[1].nodes[1].IP_ADDRESS }}"
            ],
            "resources": {"cpu": 1, "memory": "1GB", "gpu": 1},
            "ports": [8265],
        },
    ]
}
IPS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]


def grouped(**fields: Any) -> TaskConfiguration:
    conf = parse_configuration({"type": "task", **GROUPS, **fields})
    assert isinstance(conf, TaskConfiguration)
    return conf


def placed(rank: int) -> Placement:
    cluster = ClusterInfo(node_rank=rank, nodes_num=3, master_node_ip=IPS[0], node_ips=IPS)
    return Placement(instance_name=f"h-{rank}", cluster=cluster)


def test_each_node_runs_its_groups_commands_resources_and_ports() -> None:
    task = configurator_for(grouped())
    assert task.nodes_per_replica() == 3 and task.node_groups() == [1, 2]
    head, first, second = (task.for_node(n) for n in range(3))
    assert head.commands() == ["ray start --head"] and head.resources().cpu == 2
    assert first.commands() == second.commands() != head.commands()
    assert (first.resources().cpu, first.resources().gpu) == (1, 1) and head.resources().gpu == 0
    assert first.configuration.ports[0].container_port == 8265 and head.configuration.ports == []
    assert second.nodes_per_replica() == 3  # a node's configurator still counts the whole replica
    with pytest.raises(IndexError):
        task.for_node(3)


def test_a_task_of_node_groups_loads_again_from_its_dump() -> None:
    conf = grouped()
    again = parse_configuration(conf.model_dump(mode="json"))
    assert again == conf and parse_configuration(conf.model_dump()) == conf


def test_the_plan_shows_each_groups_resources() -> None:
    summary = grouped().summary()
    assert summary.scale == "node groups head 1, 1 2"
    assert summary.resources.startswith("head: cpu=2 mem=1GB") and "; 1: cpu=1 mem=1GB" in summary.resources


def test_the_replica_is_one_gang_with_each_nodes_own_request() -> None:
    enqueue = replica_enqueue(
        grouped(),
        run_id="r",
        replica_num=0,
        submissions=[0, 0, 0],
        job_workflow_ids=["a", "b", "c"],
        priority=0,
    )
    assert [(n.resources.cpu, n.resources.gpu) for n in enqueue.request.nodes] == [(2, 0), (1, 1), (1, 1)]


def test_addresses_are_filled_in_once_the_replica_is_placed() -> None:
    inp = run_input().model_copy(update={"configuration": grouped()})
    state = submit_run(inp, 1000.0).machine.state
    worker = job_input(inp, state, "ferry/main/train", 0, 2)
    assert worker.node_groups == [1, 2] and "${{ groups[0]" in worker.spec.commands[0]
    started = start_job(worker, "job-id", placed(2))
    assert started.spec.commands == ["ray start --address=10.0.0.1:6379 # 10.0.0.3"]
    assert started.spec.cluster_info.node_rank == 2


def test_a_task_without_groups_is_its_one_group() -> None:
    conf = parse_configuration(
        {"type": "task", "nodes": 2, "commands": ["echo ${{ groups[0].nodes[1].IP_ADDRESS }}"]}
    )
    assert isinstance(conf, TaskConfiguration) and configurator_for(conf).node_groups() == [2]
    with pytest.raises(ValueError, match=r"names no node: the task's groups have 2 nodes"):
        parse_configuration(
            {"type": "task", "nodes": 2, "commands": ["echo ${{ groups[1].nodes[0].IP_ADDRESS }}"]}
        )


# --- startup_order -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("order", "expected"),
    [("any", [[], [], []]), ("master-first", [[], [0], [0]]), ("workers-first", [[1, 2], [], []])],
)
def test_who_waits_for_whom(order: str, expected: list[list[int]]) -> None:
    assert [startup.waits_for(order, n, 3) for n in range(3)] == expected
    assert startup.waits_for(order, 0, 1) == []  # one node waits for nobody


def _started(order: str) -> tuple[Any, Any]:
    inp = run_input(nodes=3, startup_order=order)
    first = submit_run(inp, 1000.0)
    assert {(e.replica_num, e.job_num) for e in first.effects if isinstance(e, StartJob)} == {
        (0, 0),
        (0, 1),
        (0, 2),
    }
    return inp, first.machine


def test_master_first_workers_wait_until_the_master_runs() -> None:
    inp, machine = _started("master-first")
    waits = [job_input(inp, machine.state, "wf", 0, n).waits_for for n in range(3)]
    assert waits == [[], [0], [0]]
    provisioning = step(machine, *(news((0, n, 0), S.PROVISIONING) for n in range(3)), at=1001)
    assert not [e for e in provisioning.effects if isinstance(e, PeersStarted)]
    master_runs = step(provisioning.machine, news((0, 0, 0), S.RUNNING), at=1002)
    told = [e for e in master_runs.effects if isinstance(e, PeersStarted)]
    assert [(e.replica_num, e.job_num, e.submission_num) for e in told] == [(0, 1, 0), (0, 2, 0)]
    # A worker resubmitted once the master runs does not wait at all.
    assert job_input(inp, master_runs.machine.state, "wf", 0, 1).waits_for == []


def test_workers_first_the_master_waits_for_the_last_worker() -> None:
    inp, machine = _started("workers-first")
    assert job_input(inp, machine.state, "wf", 0, 0).waits_for == [1, 2]
    one = step(machine, news((0, 0, 0), S.PROVISIONING), news((0, 1, 0), S.RUNNING), at=1001)
    assert not [e for e in one.effects if isinstance(e, PeersStarted)]
    both = step(one.machine, news((0, 2, 0), S.DONE), at=1002)  # a worker quickly done has started too
    told = [e for e in both.effects if isinstance(e, PeersStarted)]
    assert [(e.job_num, e.submission_num) for e in told] == [(0, 0)]


def test_a_held_job_says_what_it_waits_for() -> None:
    inp, machine = _started("workers-first")
    master = job_input(inp, machine.state, "wf", 0, 0)
    assert peers_memo(master) == "workers"
    state = apply_job_event(
        None, Event(timestamp=1, name="submit", context={"replica": 0, "job": 0, "submission": 0})
    )
    state = apply_job_event(state, Event(timestamp=2, name="alloc", context={"instance": "h"}))
    state = apply_job_event(state, Event(timestamp=3, name="memo", context={"waiting": "workers"}))
    assert job_status_message(state) == "waiting for the worker nodes to start (startup_order: workers-first)"
