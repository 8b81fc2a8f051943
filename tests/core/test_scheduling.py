"""The fleet scheduler's state: blocks, gangs, priority, lost hosts; and its invariants under any sequence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.configuration.gpus import GPU
from core.configuration.resources import ResourcesSpec
from core.fleets.matching import InstanceResources
from core.fleets.placement import node_cost
from core.fleets.scheduling import (
    Grant,
    InstanceSlot,
    InstanceStatus,
    NodeRequest,
    PlacementRequest,
    SchedulerState,
    resolve_blocks,
    slot_from_info,
)
from core.wire.agent_api import GpuInfo, InstanceInfo, Resources


def slot(
    name: str, cpu: float = 8, memory: float = 32, gpu: int = 0, blocks: int | None = 1, **kw
) -> InstanceSlot:
    address = f"10.0.0.{name[-1]}" if name[-1].isdigit() else "10.0.0.99"
    return InstanceSlot(
        name=name, address=address, total=Resources(cpu=cpu, memory=memory, gpu=gpu), blocks=blocks, **kw
    )


def request(rid: str, *needs: Resources, priority: int = 0, spread: bool = True, **kw) -> PlacementRequest:
    nodes = [
        NodeRequest(job_id=f"{rid}/j{i}", resources=need) for i, need in enumerate(needs or [Resources()])
    ]
    return PlacementRequest(request_id=rid, priority=priority, nodes=nodes, spread=spread, **kw)


def fleet(*slots: InstanceSlot) -> SchedulerState:
    state = SchedulerState()
    for one in slots:
        state = state.add_instance(one)
    return state


def run(state: SchedulerState, *requests: PlacementRequest) -> tuple[SchedulerState, dict[str, Grant]]:
    for one in requests:
        state = state.enqueue(one)
    state, grants = state.schedule()
    assert state.check() == []
    return state, {grant.request_id: grant for grant in grants}


CPU2 = Resources(cpu=2, memory=4)


# --- blocks ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("need", "blocks", "reserved"),
    [
        (Resources(), 1, Resources(cpu=2, memory=8, gpu=1)),
        (Resources(cpu=2), 1, Resources(cpu=2, memory=8, gpu=1)),
        (Resources(cpu=3), 2, Resources(cpu=4, memory=16, gpu=2)),
        (Resources(memory=9), 2, Resources(cpu=4, memory=16, gpu=2)),
        (Resources(gpu=3), 3, Resources(cpu=6, memory=24, gpu=3)),
        (Resources(cpu=1, memory=1, gpu=4), 4, Resources(cpu=8, memory=32, gpu=4)),
    ],
)
def test_a_job_takes_the_whole_blocks_that_cover_its_need(
    need: Resources, blocks: int, reserved: Resources
) -> None:
    assert node_cost(
        slot("h1", cpu=8, memory=32, gpu=4, blocks=4), NodeRequest(job_id="j", resources=need)
    ) == (
        blocks,
        reserved,
    )


def test_blocks_that_do_not_divide_the_gpus_round_the_gpu_share_down() -> None:
    assert node_cost(slot("h1", gpu=3, blocks=2), NodeRequest(job_id="j", resources=Resources(gpu=1))) == (
        1,
        Resources(cpu=4, memory=16, gpu=1),
    )


def test_one_block_gives_the_whole_instance_to_one_job_and_shared_mode_packs_by_need() -> None:
    state, grants = run(fleet(slot("h1")), request("a", CPU2), request("b", CPU2))
    assert list(grants) == ["a"] and state.queue_position("b") == 1
    shared, grants = run(fleet(slot("local", blocks=None)), request("a", CPU2), request("b", CPU2))
    assert sorted(grants) == ["a", "b"]
    assert shared.capacity()[0].free == Resources(cpu=4, memory=24)
    assert shared.capacity()[0].used == Resources(cpu=4, memory=8)  # what `ferry fleet list` shows in use


def test_a_shared_block_instance_hosts_several_jobs_until_its_blocks_are_taken() -> None:
    state, grants = run(
        fleet(slot("h1", gpu=4, blocks=4)), *(request(f"r{i}", Resources(gpu=1)) for i in range(5))
    )
    assert sorted(grants) == ["r0", "r1", "r2", "r3"]
    [row] = state.capacity()
    assert (row.busy_blocks, row.free_blocks, row.free.gpu, len(row.jobs)) == (4, 0, 0, 4)


def test_resolve_blocks_auto_is_one_per_gpu_else_one_per_cpu() -> None:
    assert resolve_blocks("auto", Resources(cpu=16, gpu=8)) == 8
    assert resolve_blocks("auto", Resources(cpu=6)) == 6
    assert resolve_blocks(2, Resources(cpu=6)) == 2


def test_an_instance_from_its_agent_info_carries_hardware_for_gpu_names() -> None:
    total = Resources(cpu=16, memory=64, gpu=2)
    gpus = [GpuInfo(index=i, name="NVIDIA H100 80GB HBM3", memory_mib=81559) for i in range(2)]
    info = InstanceInfo(
        cpus=16, memory_bytes=64 * 2**30, disk_total_bytes=500 * 2**30, disk_free_bytes=0, gpus=gpus,
        total=total, free=total, free_gpu_indices=[0, 1],
    )  # fmt: skip
    one = slot_from_info("h1", "10.0.0.1", info, blocks="auto", fleet="f")
    assert one.blocks == 2 and one.hardware is not None and one.hardware.gpus[0].name == "H100"
    state = fleet(one)
    a100 = PlacementRequest(
        request_id="r",
        nodes=[NodeRequest(job_id="j", resources=Resources(gpu=1), spec=ResourcesSpec(gpu="A100"))],
    )
    assert "A100" in (state.never_fits(a100) or "")
    h100 = a100.model_copy(
        update={"nodes": [a100.nodes[0].model_copy(update={"spec": ResourcesSpec(gpu="H100")})]}
    )
    assert state.never_fits(h100) is None


def test_a_container_job_is_placed_only_where_an_engine_is_and_told_why_otherwise() -> None:
    # docs/containers.md#python: a job with `image` or `python` on a fleet without an engine is refused.
    boxed = PlacementRequest(request_id="r", nodes=[NodeRequest(job_id="j", container=True)])
    assert fleet(slot("h1")).never_fits(boxed, "lab") == (
        "no instance of fleet lab can run it: h1: needs a container engine (image or python),"
        " instance has none"
    )
    _, grants = run(fleet(slot("h1"), slot("h2", container_engine="podman 4.3.1")), boxed)
    assert [placement.instance for placement in grants["r"].placements] == ["h2"]


# --- gangs ----------------------------------------------------------------------------------------------


def test_a_gang_is_spread_over_distinct_instances_in_node_order() -> None:
    state, grants = run(fleet(slot("h1"), slot("h2"), slot("h3")), request("g", CPU2, CPU2))
    grant = grants["g"]
    assert [p.node for p in grant.placements] == [0, 1]
    assert len({p.instance for p in grant.placements}) == 2
    assert grant.addresses == [f"10.0.0.{p.instance[-1]}" for p in grant.placements]
    assert state.grant("g") == grant


def test_a_gang_gets_all_its_nodes_or_none() -> None:
    state, grants = run(
        fleet(slot("h1"), slot("h2"), slot("h3")), request("busy", CPU2), request("g", CPU2, CPU2, CPU2)
    )
    assert list(grants) == ["busy"] and state.queue_position("g") == 1
    assert all(not row.jobs for row in state.capacity() if row.name != state.job_instance("busy/j0"))
    state, grants = run(state.release("busy/j0"))
    assert list(grants) == ["g"] and len({p.instance for p in grants["g"].placements}) == 3


def test_a_gang_finds_an_assignment_when_the_first_choice_of_a_node_is_the_only_fit_of_another() -> None:
    # j0 fits both and prefers h1 (by name), j1 fits only h1 (GPU): the matching moves j0 to h2.
    _, grants = run(
        fleet(slot("h1", cpu=4, gpu=1), slot("h2", cpu=8)), request("g", CPU2, Resources(cpu=2, gpu=1))
    )
    assert [(p.job_id, p.instance) for p in grants["g"].placements] == [("g/j0", "h2"), ("g/j1", "h1")]


def test_an_unspread_gang_may_share_an_instance() -> None:
    _, grants = run(fleet(slot("local", blocks=None)), request("g", CPU2, CPU2, spread=False))
    assert [p.instance for p in grants["g"].placements] == ["local", "local"]


def test_never_fits_explains_why() -> None:
    state = fleet(slot("h1", gpu=2), slot("h2", gpu=2))
    assert state.never_fits(request("g", Resources(gpu=2), Resources(gpu=2))) is None
    assert "needs 4 GPUs, instance has 2" in (state.never_fits(request("big", Resources(gpu=4))) or "")
    assert "distinct" in (state.never_fits(request("g3", CPU2, CPU2, CPU2)) or "")
    assert state.never_fits(request("x", fleets=["other"])) == "fleet other has no instance"
    assert state.never_fits(request("x", fleets=["a", "b"])) == "fleets a, b have no instance"
    assert fleet().never_fits(request("x"), "lab") == "fleet lab has no instance"


def test_never_fits_says_each_reason_once_in_one_line() -> None:
    # Issue 17: the spec's GPU reason (with the models) stands for the amount's; it is not said twice.
    hardware = InstanceResources(cpus=8, memory_gb=32, disk_gb=100)
    h1, h2 = (slot(name, hardware=hardware) for name in ("h1", "h2"))
    gpus = NodeRequest(job_id="j", resources=Resources(gpu=1), spec=ResourcesSpec(gpu="H100:1..2"))
    why = fleet(h1, h2).never_fits(PlacementRequest(request_id="r", nodes=[gpus]), "lab")
    assert why == "no instance of fleet lab can run it: h1, h2: needs 1..2 GPUs H100, instance has no GPUs"
    assert why.count("GPUs") == 2 and "\n" not in why
    both = ResourcesSpec(cpu="16..", memory="64GB..")
    too_small = NodeRequest(job_id="j", resources=Resources(cpu=16, memory=64), spec=both)
    assert node_cost(h1, too_small) == [
        "needs 16.. CPUs, instance has 8",
        "needs 64GB.. memory, instance has 32GB",
    ]
    # Without a spec the amount says it; the reasons of one instance are joined by `;`, instances by `.`.
    big = Resources(cpu=16, gpu=1)
    assert fleet(slot("h1"), slot("h2", cpu=32)).never_fits(request("r", big), "lab") == (
        "no instance of fleet lab can run it: h1: needs 16 CPUs, instance has 8; needs 1 GPUs,"
        " instance has 0. h2: needs 1 GPUs, instance has 0"
    )
    many = fleet(*(slot(f"h{n}") for n in range(1, 8)))
    assert many.never_fits(request("r", big), "lab") == (
        "no instance of fleet lab can run it: h1, h2, h3, h4, h5 and 2 more: needs 16 CPUs, instance has 8;"
        " needs 1 GPUs, instance has 0"
    )
    # A gang names the node no instance can run.
    assert fleet(slot("h1", gpu=1), slot("h2", gpu=1)).never_fits(request("g", CPU2, big), "lab") == (
        "no instance of fleet lab can run node 1: h1, h2: needs 16 CPUs, instance has 8"
    )


# --- priority -------------------------------------------------------------------------------------------


def test_priority_first_then_submission_order() -> None:
    state, grants = run(fleet(slot("h1")), request("hold", CPU2))
    state, _ = run(
        state,
        request("low", CPU2, priority=1),
        request("high", CPU2, priority=90),
        request("mid", CPU2, priority=50),
    )
    state, _ = run(state, request("high2", CPU2, priority=90))
    assert [r.request_id for r in state.waiting()] == ["high", "high2", "mid", "low"]
    order = []
    job = "hold/j0"
    while True:
        state, grants = run(state.release(job))
        if not grants:
            break
        [grant] = grants.values()
        order.append(grant.request_id)
        job = grant.placements[0].job_id
    assert order == ["high", "high2", "mid", "low"] and state.idle()


def test_set_priority_reorders_the_queue() -> None:
    state, _ = run(fleet(slot("h1")), request("hold", CPU2), request("a", CPU2), request("b", CPU2))
    assert (state.queue_position("a"), state.queue_position("b")) == (1, 2)
    state = state.set_priority("b", 10)
    assert (state.queue_position("a"), state.queue_position("b")) == (2, 1)
    state, grants = run(state.release("hold/j0"))
    assert list(grants) == ["b"]
    with pytest.raises(ValueError, match="0..100"):
        state.set_priority("a", 101)


def test_a_lower_priority_never_takes_what_a_blocked_higher_one_could_use() -> None:
    state, _ = run(fleet(slot("h1"), slot("h2")), request("hold", CPU2))
    state, grants = run(state, request("gang", CPU2, CPU2, priority=50), request("small", CPU2))
    assert grants == {} and state.queue_position("small") == 2


def test_a_lower_priority_backfills_instances_the_blocked_one_can_never_use() -> None:
    state, _ = run(fleet(slot("gpu1", gpu=1), slot("cpu1")), request("hold", Resources(gpu=1)))
    state, grants = run(state, request("gpujob", Resources(gpu=1), priority=50), request("cpujob", CPU2))
    assert list(grants) == ["cpujob"] and grants["cpujob"].placements[0].instance == "cpu1"


def test_a_request_that_can_never_fit_holds_nothing_up() -> None:
    state, grants = run(
        fleet(slot("h1"), slot("h2")), request("g3", CPU2, CPU2, CPU2, priority=90), request("a", CPU2)
    )
    assert list(grants) == ["a"] and state.unplaceable() == {"g3": state.never_fits(state.queue[0])}


def test_a_long_queue_behind_full_instances_costs_a_pass_nothing_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A burst waits behind a full instance: the pass decides the head of the queue alone, and still
    backfills an instance that the blocked requests could never use (issue 19: each step of the fleet
    tried every waiting request, empty instances and all)."""
    state, _ = run(fleet(slot("big", cpu=16, blocks=None), slot("small", cpu=1, blocks=None)))
    state, grants = run(state, *(request(f"r{n:03}", CPU2) for n in range(200)))
    assert len(grants) == 8 and state.queue_position("r008") == 1
    tried: list[str] = []
    never_fits = SchedulerState.never_fits

    def counted(self: SchedulerState, one: PlacementRequest, fleet: str | None = None) -> str | None:
        tried.append(one.request_id)
        return never_fits(self, one, fleet)

    monkeypatch.setattr(SchedulerState, "never_fits", counted)
    state, grants = run(state, request("tiny", Resources(cpu=1)))
    assert list(grants) == ["tiny"] and grants["tiny"].placements[0].instance == "small"
    # The head blocks `big`; the next finds `small` alone, too small for it, and decides for the rest.
    assert tried == ["r008", "r009"]
    tried.clear()
    state, grants = run(state.release("r000/j0"))
    assert list(grants) == ["r008"] and tried == ["r009", "r010"]
    assert [r.request_id for r in state.waiting()][:2] == ["r009", "r010"] and len(state.queue) == 191


# --- instances ------------------------------------------------------------------------------------------


def test_an_unreachable_instance_names_its_jobs_takes_no_grants_and_comes_back() -> None:
    state, grants = run(fleet(slot("h1"), slot("h2")), request("a", CPU2))
    lost = grants["a"].placements[0].instance
    state, jobs = state.mark_unreachable(lost)
    assert jobs == ["a/j0"] and state.instances[lost].status == InstanceStatus.UNREACHABLE
    state, grants = run(state, request("b", CPU2), request("c", CPU2))
    assert list(grants) == ["b"] and grants["b"].placements[0].instance != lost
    state, grants = run(state.release("a/j0").mark_ready(lost))
    assert list(grants) == ["c"] and grants["c"].placements[0].instance == lost


def test_removing_a_busy_instance_deletes_it_once_its_last_job_is_released() -> None:
    state, _ = run(fleet(slot("h1")), request("a", CPU2))
    state = state.remove_instance("h1")
    state, grants = run(state, request("b", CPU2))
    assert grants == {} and state.instances["h1"].status == InstanceStatus.DELETED
    assert state.unplaceable("lab") == {"b": "fleet lab has no instance"}
    state = state.release("a/j0")
    assert "h1" not in state.instances


def test_enqueue_is_idempotent_and_cancel_releases() -> None:
    state, grants = run(fleet(slot("h1")), request("a", CPU2))
    assert state.enqueue(request("a", CPU2)) == state
    with pytest.raises(ValueError, match="already queued or placed"):
        state.enqueue(PlacementRequest(request_id="other", nodes=[NodeRequest(job_id="a/j0")]))
    state = state.cancel("a")
    assert state.idle()


def test_a_busy_instance_keeps_its_jobs_when_described_anew() -> None:
    state, _ = run(fleet(slot("h1")), request("a", CPU2))
    again = state.add_instance(slot("h1").model_copy(update={"address": "192.168.0.1"}))
    assert again.instances["h1"].address == "192.168.0.1" and again.job_instance("a/j0") == "h1"
    # Smaller than what its jobs hold: they keep it, nothing is free.
    smaller = state.add_instance(slot("h1", cpu=1))
    assert smaller.job_instance("a/j0") == "h1" and smaller.instances["h1"].free().cpu == 0


def test_the_state_survives_a_round_trip_through_json() -> None:
    hardware = InstanceResources(cpus=8, memory_gb=32, disk_gb=100, gpus=[GPU(name="A100", memory_gb=80)])
    state, _ = run(
        fleet(slot("h1", hardware=hardware), slot("h2")), request("a", CPU2, CPU2), request("b", CPU2)
    )
    assert SchedulerState.model_validate_json(state.model_dump_json()) == state


# --- properties -----------------------------------------------------------------------------------------

needs = st.builds(
    Resources,
    cpu=st.sampled_from([0, 0.5, 1, 2, 3]),
    memory=st.sampled_from([0, 1, 4, 9]),
    gpu=st.sampled_from([0, 0, 0, 1, 2]),
)
slots = st.builds(
    InstanceSlot,
    name=st.just(""),
    address=st.just(""),
    total=st.builds(
        Resources,
        cpu=st.sampled_from([2, 4, 8]),
        memory=st.sampled_from([8, 16]),
        gpu=st.sampled_from([0, 2, 4]),
    ),
    blocks=st.sampled_from([None, 1, 2, 3, 4]),
)
ops = st.lists(
    st.tuples(
        st.sampled_from(["enqueue"] * 4 + ["release"] * 2 + ["lost", "back", "priority", "cancel", "remove"]),
        st.integers(0, 1000),
    ),
    min_size=4,
    max_size=40,
)


def ahead(first: PlacementRequest, then: PlacementRequest) -> bool:
    return (-first.priority, first.seq) < (-then.priority, then.seq)


def usable_by(state: SchedulerState, waiting: PlacementRequest) -> set[str]:
    return {
        name
        for name, one in state.instances.items()
        if one.status != InstanceStatus.DELETED
        and any(isinstance(node_cost(one, node), tuple) for node in waiting.nodes)
    }


@settings(max_examples=300)
@given(st.lists(slots, min_size=2, max_size=4), ops, st.data())
def test_any_sequence_keeps_the_invariants_and_releasing_everything_leaks_nothing(
    instance_list: list[InstanceSlot], operations: list[tuple[str, int]], data: st.DataObject
) -> None:
    state = fleet(
        *(
            one.model_copy(update={"name": f"h{i}", "address": f"10.9.0.{i}"})
            for i, one in enumerate(instance_list)
        )
    )
    requests: dict[str, PlacementRequest] = {}
    for step, (op, pick) in enumerate(operations):
        names = sorted(state.instances)
        if op == "enqueue":
            nodes = data.draw(st.lists(needs, min_size=1, max_size=3))
            one = request(f"r{step}", *nodes, priority=pick % 4, spread=data.draw(st.booleans()))
            if state.never_fits(one) is None:
                state = state.enqueue(one)
                requests[one.request_id] = one
        elif op == "release":
            jobs = sorted(job for s in state.instances.values() for job in s.allocations)
            state = state.release(jobs[pick % len(jobs)]) if jobs else state
        elif op == "lost" and names:
            state, lost_jobs = state.mark_unreachable(names[pick % len(names)])
            assert set(lost_jobs) == set(state.instances[names[pick % len(names)]].allocations)
        elif op == "back" and names:
            state = state.mark_ready(names[pick % len(names)])
        elif op == "remove" and names and pick % 3 == 0:
            state = state.remove_instance(names[pick % len(names)])
        elif op == "priority" and state.queue:
            state = state.set_priority(state.queue[pick % len(state.queue)].request_id, pick % 101)
        elif op == "cancel" and requests:
            state = state.cancel(sorted(requests)[pick % len(requests)])
        before = state
        state, grants = state.schedule()
        assert state.check() == []
        for slot in state.instances.values():  # the usage carried from step to step is the sum's
            busy, used = slot.used()
            fresh = InstanceSlot.model_validate(slot.model_dump()).used()
            assert busy == fresh[0] and used.gpu == fresh[1].gpu
            assert used.cpu == pytest.approx(fresh[1].cpu) and used.memory == pytest.approx(fresh[1].memory)
        for grant in grants:
            asked = next(r for r in before.queue if r.request_id == grant.request_id)
            assert [p.job_id for p in grant.placements] == [n.job_id for n in asked.nodes]  # whole gang
            if asked.spread:
                assert len({p.instance for p in grant.placements}) == len(asked.nodes)
            assert all(before.instances[p.instance].status == InstanceStatus.READY for p in grant.placements)
            for waiting in state.queue:  # nothing waiting ahead of a grant could have used its instances
                if ahead(waiting, asked) and state.never_fits(waiting) is None:
                    assert not {p.instance for p in grant.placements} & usable_by(state, waiting)
        assert state.schedule()[1] == []  # a pass leaves nothing placeable behind
    for one in list(state.queue):
        state = state.cancel(one.request_id)
    for job in sorted(job for one in state.instances.values() for job in one.allocations):
        state = state.release(job)
    assert state.idle()
    for row in state.capacity():
        assert row.busy_blocks == 0 and row.free == row.total and row.free_blocks == row.blocks
        assert row.status != InstanceStatus.DELETED  # a deleted instance goes with its last job
