"""The fleet scheduler's book (core.fleets.book): what FleetWorkflow does on each message, without
Temporal."""

from __future__ import annotations

from typing import cast

from core.configuration import RunConfiguration, parse_configuration
from core.fleets.book import FleetBook, apply, deployed, schedule, undelivered
from core.fleets.messages import (
    CancelRequest,
    DeleteFleet,
    InstanceChange,
    Notice,
    NoticeKind,
    ReleaseJob,
    SetQueuedPriorityRequest,
    Undelivered,
)
from core.fleets.placement import InstanceSlot, InstanceStatus
from core.fleets.scheduling import QueueIndex
from core.runs.submissions import replica_enqueue
from core.status import JobTerminationReason
from core.wire.agent_api import Resources
from core.wire.job_messages import Enqueue, NodeRequest, PlacementRequest
from core.wire.workflow_ids import job_submission_id

SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}


def host(n: int, blocks: int | None = 1, cpu: float = 8) -> InstanceSlot:
    return InstanceSlot(
        name=f"h-{n}",
        address=f"10.0.0.{n + 1}",
        total=Resources(cpu=cpu, memory=32),
        blocks=blocks,
        fleet="h",
    )


def book(hosts: int = 3, local: bool = False, blocks: int | None = 1) -> FleetBook:
    made, notices = deployed(FleetBook(name="h", local=local), [host(n, blocks) for n in range(hosts)], {})
    assert notices == []
    return made


def gang(name: str, nodes: int = 1, priority: int = 0, cpu: float = 1, container: bool = False) -> Enqueue:
    jobs = [f"{name}-j{n}" for n in range(nodes)]
    request = PlacementRequest(
        request_id=name,
        priority=priority,
        nodes=[NodeRequest(job_id=job, resources=Resources(cpu=cpu), container=container) for job in jobs],
    )
    return Enqueue(request=request, notify={job: f"wf/{job}" for job in jobs})


def step(state: FleetBook, *commands: object) -> tuple[FleetBook, list[Notice]]:
    """Apply the commands in order, then schedule: one turn of the workflow's loop."""
    notices: list[Notice] = []
    for command in commands:
        state, more = apply(state, command)  # type: ignore[arg-type]
        notices += more
    state, more = schedule(state)
    return state, notices + more


def kinds(notices: list[Notice]) -> list[tuple[str, str]]:
    return [(n.kind.value, n.job_id) for n in notices]


def test_a_gang_is_placed_whole_on_distinct_instances_with_its_masters_address() -> None:
    state, notices = step(book(), gang("a", nodes=2))
    placed = [n for n in notices if n.kind == NoticeKind.PLACED]
    assert [n.workflow_id for n in placed] == ["wf/a-j0", "wf/a-j1"]
    clusters = [n.placement.cluster for n in placed if n.placement is not None]
    instances = {n.placement.instance_name for n in placed if n.placement is not None}
    assert len(instances) == 2
    assert [c.node_rank for c in clusters] == [0, 1] and {c.nodes_num for c in clusters} == {2}
    assert clusters[0].master_node_ip == clusters[1].master_node_ip == clusters[0].node_ips[0]
    assert state.scheduler.check() == []


def test_a_fleet_that_records_its_queue_tells_no_job_it_waits_and_lists_the_waiting_in_serving_order() -> (
    None
):
    state, _ = step(book(hosts=1), gang("a"))
    for command in (gang("b"), gang("c", priority=5)):
        state, _ = apply(state, command)
    state, notices = schedule(state, tell_queued=False)
    assert notices == [] and state.told_queued == []
    assert state.waiting_jobs() == ["c-j0", "b-j0"]
    state, _ = apply(state, ReleaseJob(job_id="a-j0"))
    state, notices = schedule(state, tell_queued=False)
    assert kinds(notices) == [("placed", "c-j0")] and state.waiting_jobs() == ["b-j0"]


def test_the_local_fleet_lets_a_gang_share_its_one_instance() -> None:
    state = book(hosts=1, local=True, blocks=None)
    state, notices = step(state, gang("a", nodes=2))
    assert kinds(notices) == [("placed", "a-j0"), ("placed", "a-j1")]


def test_a_gang_that_never_fits_is_refused_at_once_and_one_that_waits_is_told_once() -> None:
    state, notices = step(book(), gang("big", nodes=4))
    assert [n.kind for n in notices] == [NoticeKind.REFUSED] * 4
    assert (
        notices[0].message == "fleet h cannot run it: its 4 nodes need distinct instances, 3 could hold them"
    )
    assert state.scheduler.queue == []
    state, _ = step(state, gang("a"), gang("b"), gang("c"))
    state, notices = step(state, gang("d", priority=5))
    assert kinds(notices) == [("queued", "d-j0")] and notices[0].position == 1
    state, notices = step(state, gang("e"))
    assert kinds(notices) == [("queued", "e-j0")] and notices[0].position == 2
    state, notices = step(state)
    assert notices == []


def test_priority_then_submission_order_and_set_priority() -> None:
    state, _ = step(book(hosts=1), gang("busy"))
    state, _ = step(state, gang("low", priority=10), gang("high", priority=50), gang("later", priority=5))
    assert [r.request_id for r in state.scheduler.waiting()] == ["high", "low", "later"]
    state, _ = step(state, SetQueuedPriorityRequest(request_ids=["later", "unknown"], priority=60))
    assert [r.request_id for r in state.scheduler.waiting()] == ["later", "high", "low"]
    state, notices = step(state, ReleaseJob(job_id="busy-j0"))
    assert kinds(notices) == [("placed", "later-j0")]


def test_a_lost_instance_terminates_its_jobs_keeps_their_capacity_and_is_cleaned_when_back() -> None:
    state, _ = step(book(hosts=2), gang("a"), gang("b"))
    where = {job: state.scheduler.job_instance(job) for job in ("a-j0", "b-j0")}
    lost = where["a-j0"]
    assert lost is not None
    state, notices = step(state, InstanceChange(name=lost, status=InstanceStatus.UNREACHABLE, note="silent"))
    assert kinds(notices) == [("terminate", "a-j0")]
    assert notices[0].message == f"instance {lost} is unreachable: silent"
    assert state.lost == {lost: ["a-j0"]}
    state, notices = step(state, gang("c"))
    assert kinds(notices) == [("queued", "c-j0")]  # no grant on the lost instance, held capacity or not
    state, notices = step(state, ReleaseJob(job_id="a-j0"))
    assert notices == []
    state, notices = step(
        state, InstanceChange(name=lost, status=InstanceStatus.READY, slot=host(int(lost[-1])))
    )
    assert kinds(notices) == [("placed", "c-j0")] and state.lost == {}


def test_a_job_stopped_while_it_waits_withdraws_its_replica_whenever_it_is_heard() -> None:
    state, _ = step(book(hosts=2), gang("busy-1"), gang("busy-2"))
    # Heard after its replica was enqueued: the request goes, and its other node is told.
    state, _ = step(state, gang("pair", nodes=2), gang("trio", nodes=1))
    state, notices = step(state, ReleaseJob(job_id="pair-j0"))
    assert [r.request_id for r in state.scheduler.queue] == ["trio"]
    assert kinds(notices) == [("placement_refused", "pair-j1")]
    # Heard before: the replica is never enqueued.
    state, notices = step(state, ReleaseJob(job_id="early-j1"))
    state, notices = step(state, gang("early", nodes=2))
    assert kinds(notices) == [("placement_refused", "early-j0")]
    assert [r.request_id for r in state.scheduler.queue] == ["trio"] and state.gone == []


def test_a_placement_that_cannot_be_delivered_is_given_back() -> None:
    state, notices = step(book(hosts=1), gang("a"))
    assert state.scheduler.job_instance("a-j0") is not None
    state = undelivered(state, notices[0])
    assert state.scheduler.idle()


def test_notices_that_come_back_undelivered_a_step_later_free_what_they_held_once() -> None:
    """The workflow does not wait for its signals: one that fails comes back through the inbox, in order
    with what arrived meanwhile (docs/fleets.md#the-workflow-and-its-book)."""
    state, notices = step(book(hosts=1), gang("a"), gang("b"), gang("c"))
    placed_a, queued_b, queued_c = notices
    assert kinds(notices) == [("placed", "a-j0"), ("queued", "b-j0"), ("queued", "c-j0")]
    # b's job had ended: its request goes; a's capacity, given back, goes to c (b's never will).
    state, notices = step(state, gang("d"), Undelivered(notice=queued_b), Undelivered(notice=placed_a))
    assert kinds(notices) == [("placed", "c-j0"), ("queued", "d-j0")]
    assert [r.request_id for r in state.scheduler.queue] == ["d"] and "b-j0" not in state.notify
    # A job that released what it held before its placement failed to reach it: nothing is freed twice.
    state, notices = step(state, ReleaseJob(job_id="c-j0"))
    assert kinds(notices) == [("placed", "d-j0")]
    state, notices = step(state, Undelivered(notice=queued_c), Undelivered(notice=placed_a))
    assert notices == [] and state.scheduler.job_instance("d-j0") == "h-0"
    assert state.scheduler.check() == []


def test_cancel_takes_back_a_waiting_or_granted_request() -> None:
    state, _ = step(book(hosts=1), gang("a"), gang("b"))
    state, _ = step(state, CancelRequest(request_id="b"), CancelRequest(request_id="a"))
    assert state.scheduler.idle() and state.notify == {}


def test_delete_refuses_what_waits_and_ends_once_the_last_job_is_released() -> None:
    state, _ = step(book(hosts=2), gang("a"), gang("b", nodes=2))
    state, notices = step(state, DeleteFleet())
    assert kinds(notices) == [("placement_refused", "b-j0"), ("placement_refused", "b-j1")]
    assert state.deleting and not state.finished()
    state, notices = step(state, gang("c"))
    assert [n.kind for n in notices] == [NoticeKind.REFUSED]
    state, _ = step(state, ReleaseJob(job_id="a-j0"))
    assert state.finished() and state.views() == []


def test_the_recorded_views_say_what_each_instance_s_jobs_hold() -> None:
    # `ferry fleet list`'s USED and FREE (docs/cli.md#ferry-fleet-list): a job on a shared instance holds
    # its need; with one block, the whole instance.
    shared, _ = step(book(hosts=1, blocks=None), gang("a", cpu=2))
    assert [(v.jobs, v.in_use) for v in shared.views()] == [(1, Resources(cpu=2))]
    whole, _ = step(book(hosts=1), gang("a", cpu=2))
    assert [(v.busy_blocks, v.in_use) for v in whole.views()] == [(1, Resources(cpu=8, memory=32))]
    released, _ = step(whole, ReleaseJob(job_id="a-j0"))
    assert [v.in_use for v in released.views()] == [Resources()]


def test_hosts_not_deployed_are_recorded_and_join_when_they_are() -> None:
    state, _ = deployed(FleetBook(name="h", local=False), [host(0)], {"h-1": "cannot connect"})
    assert [(v.name, v.status, v.message) for v in state.views()] == [
        ("h-0", "ready", None),
        ("h-1", "unreachable", "cannot connect"),
    ]
    state, _ = step(state, InstanceChange(name="h-1", status=InstanceStatus.READY, slot=host(1)))
    assert state.pending == {} and sorted(state.scheduler.instances) == ["h-0", "h-1"]


def test_an_instance_described_anew_is_placed_on_as_it_is_now_and_its_jobs_keep_what_they_hold() -> None:
    # docs/fleets.md#what-an-instance-is: the local agent started again, now with an engine and more CPUs.
    state = book(hosts=1, local=True, blocks=None)
    state, notices = step(state, gang("a", cpu=6), gang("img", container=True))
    assert kinds(notices) == [("placement_refused", "img-j0"), ("placed", "a-j0")]
    assert "container engine" in (notices[0].message or "")
    bigger = host(0, blocks=None, cpu=16).model_copy(update={"container_engine": "podman 4.3.1"})
    state, notices = step(state, InstanceChange(name="h-0", status=InstanceStatus.READY, slot=bigger))
    assert notices == [] and state.scheduler.job_instance("a-j0") == "h-0"
    state, notices = step(state, gang("img2", container=True), gang("b", cpu=8))
    assert sorted(kinds(notices)) == [("placed", "b-j0"), ("placed", "img2-j0")]  # 6 + 8 + 1 <= 16
    [view] = state.views()
    assert (view.container_engine, view.total.cpu, view.jobs) == ("podman 4.3.1", 16, 3)


def test_jobs_holding_gpus_an_instance_no_longer_has_are_ended_with_the_reason() -> None:
    gpus = [host(n).model_copy(update={"total": Resources(cpu=8, memory=32, gpu=2)}) for n in range(2)]
    state, _ = deployed(FleetBook(name="h", local=False), gpus, {})
    state, _ = step(state, gang("gpu"), gang("cpu"))  # one block each: the whole host, both GPUs
    where = state.scheduler.job_instance("gpu-j0")
    assert where is not None
    same = state.scheduler.instances[where].model_copy(update={"agent_release": "0.25.0", "allocations": {}})
    unchanged, notices = step(state, InstanceChange(name=where, status=InstanceStatus.READY, slot=same))
    assert notices == [] and unchanged.scheduler.job_instance("gpu-j0") == where
    fewer = same.model_copy(update={"total": Resources(cpu=8, memory=32, gpu=1)})
    state, notices = step(state, InstanceChange(name=where, status=InstanceStatus.READY, slot=fewer))
    assert kinds(notices) == [("terminate", "gpu-j0")]
    assert notices[0].reason == JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY
    assert notices[0].message == (
        f"instance {where} now has 1 GPU(s), fewer than its jobs held (2): the job's GPUs may be gone"
    )
    state, notices = step(state, ReleaseJob(job_id="gpu-j0"))
    assert state.scheduler.instances[where].total.gpu == 1 and state.scheduler.job_instance("cpu-j0")


def test_a_replicas_request_from_a_run_configuration() -> None:
    conf = cast(
        RunConfiguration,
        parse_configuration({"type": "task", "commands": ["x"], "nodes": 2, "resources": SMALL}),
    )
    enqueue = replica_enqueue(
        conf, run_id="r-1", replica_num=0, submissions=[1, 1], job_workflow_ids=["w0", "w1"], priority=7
    )
    jobs = [job_submission_id("r-1", 0, n, 1) for n in range(2)]
    assert enqueue.request.request_id == "r-1-r0-s1" and enqueue.request.priority == 7
    assert [n.job_id for n in enqueue.request.nodes] == jobs
    assert enqueue.notify == dict(zip(jobs, ["w0", "w1"], strict=True))
    assert not any(node.container for node in enqueue.request.nodes)
    # `python` runs in a container: it is placed only where an engine is (docs/containers.md#python).
    snake = cast(RunConfiguration, parse_configuration({"type": "task", "python": "3.11", "commands": ["x"]}))
    boxed = replica_enqueue(
        snake, run_id="s-1", replica_num=0, submissions=[0], job_workflow_ids=["w"], priority=0
    )
    assert boxed.request.nodes[0].container


def test_a_steps_queue_index_follows_the_queue_whoever_changes_it() -> None:
    """One QueueIndex across a step's commands (workflows/fleet.py): a repeat is known, a clash refused,
    and a request cancelled by another command may be queued again."""
    index = QueueIndex()
    state = book(hosts=1)
    state, _ = apply(state, gang("a", cpu=8), index)  # the host's whole
    state, _ = apply(state, gang("b", cpu=8), index)
    state, notices = apply(state, gang("b", cpu=8), index)
    assert notices == [] and [r.request_id for r in state.scheduler.queue] == ["a", "b"]
    b = gang("b")
    clash = Enqueue(request=b.request.model_copy(update={"request_id": "c"}), notify=b.notify)
    state, notices = apply(state, clash, index)
    assert kinds(notices) == [("placement_refused", "b-j0")]
    state, _ = apply(state, CancelRequest(request_id="b"), index)
    state, notices = apply(state, gang("b", cpu=8), index)
    assert notices == [] and [r.request_id for r in state.scheduler.queue] == ["a", "b"]
    state, notices = step(state)
    assert kinds(notices) == [("placed", "a-j0"), ("queued", "b-j0")]
