"""`ferry offer`'s answer (core/fleets/offers.py): each instance now, when free, or never, and why; the
whole replica by the scheduler's own rules."""

from __future__ import annotations

from core.configuration.gpus import GPU
from core.fleets.matching import InstanceResources
from core.fleets.offers import Fit, offer
from core.fleets.placement import InstanceStatus
from core.wire.agent_api import Resources
from tests.core.test_scheduling import fleet, request, run, slot

GPU1 = Resources(cpu=1, memory=4, gpu=1)


def test_free_busy_and_too_small_instances_each_say_so() -> None:
    state = fleet(slot("h1", gpu=2, blocks=2), slot("h2", gpu=2, blocks=2), slot("h3", gpu=0))
    state, _ = run(state, request("other", Resources(gpu=2)))  # takes both blocks of h1

    answer = offer("lab", state, request("offer", GPU1))

    by_name = {one.instance: one for one in answer.instances}
    assert by_name["h1"].fit == Fit.WHEN_FREE
    assert by_name["h1"].reasons == ["1 job(s) hold 2 of its 2 blocks"]
    assert (by_name["h2"].fit, by_name["h2"].nodes) == (Fit.NOW, [0])
    assert by_name["h3"].fit == Fit.NEVER
    assert by_name["h3"].reasons == ["needs 1 GPUs, instance has 0"]
    assert answer.starts_now and answer.never is None


def test_a_gang_that_needs_more_instances_than_are_free_waits() -> None:
    state = fleet(slot("h1"), slot("h2"))
    state, _ = run(state, request("other", Resources(cpu=8)))
    answer = offer("lab", state, request("offer", Resources(cpu=1), Resources(cpu=1)))
    assert [one.fit for one in answer.instances] == [Fit.WHEN_FREE, Fit.NOW]
    assert not answer.starts_now and answer.never is None


def test_a_replica_no_instance_can_ever_hold_says_why_in_the_no_capacity_words() -> None:
    state = fleet(slot("h1", cpu=2), slot("h2", cpu=2))
    answer = offer("lab", state, request("offer", Resources(cpu=64)))
    assert [one.fit for one in answer.instances] == [Fit.NEVER, Fit.NEVER]
    assert answer.never == "no instance of fleet lab can run it: h1, h2: needs 64 CPUs, instance has 2"
    assert not answer.starts_now


def test_a_gang_queued_ahead_holds_the_offer_back() -> None:
    state = fleet(slot("h1", cpu=4, blocks=None), slot("h2", cpu=4, blocks=None))
    state, _ = run(state, request("big", Resources(cpu=3), Resources(cpu=3)))
    state = state.enqueue(request("queued", Resources(cpu=2), Resources(cpu=2)))  # waits for `big`
    answer = offer("lab", state, request("offer", Resources(cpu=1)))
    assert [one.fit for one in answer.instances] == [Fit.NOW, Fit.NOW]  # a CPU is free on each...
    assert not answer.starts_now  # ...but the gang ahead is served first


def test_an_unreachable_instance_is_never_now() -> None:
    state, _ = fleet(slot("h1"), slot("h2")).mark_unreachable("h2")
    answer = offer("lab", state, request("offer", Resources(cpu=1)))
    assert [(one.instance, one.fit) for one in answer.instances] == [("h1", Fit.NOW), ("h2", Fit.WHEN_FREE)]
    assert answer.instances[1].status == InstanceStatus.UNREACHABLE
    assert answer.instances[1].reasons == ["instance is unreachable"]


def test_each_instance_says_what_it_is_as_its_agent_described_it() -> None:
    hardware = InstanceResources(cpus=8, memory_gb=32, disk_gb=100, gpus=[GPU(name="T4", memory_gb=16)] * 2)
    described = slot("h1", gpu=2, hardware=hardware, container_engine="podman 4.3.1", agent_release="0.25.0")
    answer = offer("lab", fleet(described, slot("h2")), request("offer", GPU1))
    assert [one.described for one in answer.instances] == [
        "cpu=8 mem=32GB disk=100GB gpu=2xT4:16GB, podman 4.3.1, agent 0.25.0",
        "",  # never described (a slot from before descriptions)
    ]
