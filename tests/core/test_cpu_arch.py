"""CPU architectures are matched (docs/fleets.md#placement-and-blocks): a job naming one (`cpu: arm:4`) goes
only to instances whose agent reports it; an instance of unknown architecture (an agent of 0.1.0, or a host
neither x86 nor arm) takes none of them; a job naming none goes anywhere. Pure: no Temporal, no agent."""

from __future__ import annotations

import pytest

from core.configuration.resources import ResourcesSpec, known_arch
from core.fleets.matching import InstanceResources, shortfalls
from core.fleets.offers import Fit, offer
from core.fleets.placement import InstanceSlot, hardware_from_info, node_cost
from core.wire.agent_api import InstanceInfo, Resources
from core.wire.job_messages import NodeRequest, PlacementRequest
from tests.core.placement_lab import lab, placed_on


def hardware(arch: str | None) -> InstanceResources:
    return InstanceResources(cpus=8, memory_gb=32, disk_gb=100, cpu_arch=arch)


def slot(name: str, arch: str | None) -> InstanceSlot:
    return InstanceSlot(
        name=name, address="10.0.0.1", total=Resources(cpu=8, memory=32), fleet="lab", hardware=hardware(arch)
    )


def job(cpu: str | int = 1, rid: str = "r") -> PlacementRequest:
    spec = ResourcesSpec.model_validate({"cpu": cpu, "memory": "1GB.."})
    node = NodeRequest(job_id=f"{rid}/j0", resources=Resources(cpu=1, memory=1), spec=spec)
    return PlacementRequest(request_id=rid, nodes=[node])


# --- matching -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "arch", "reason"),
    [
        ("arm:1..", "x86", "needs arm CPUs, instance has x86"),
        ("arm:1..", None, "needs arm CPUs, instance has CPUs of an unknown architecture"),
        ("arm:1..", "arm", None),
        ("x86:1..", "x86", None),
        ("x86:1..", "arm", "needs x86 CPUs, instance has arm"),
        ("1..", "x86", None),
        ("1..", "arm", None),
        ("1..", None, None),
    ],
)
def test_an_architecture_is_matched_and_no_architecture_matches_any(
    cpu: str, arch: str | None, reason: str | None
) -> None:
    spec = ResourcesSpec.model_validate({"cpu": cpu})
    assert shortfalls(hardware(arch), spec).get("cpu_arch") == reason


def test_an_arm_job_is_never_placed_on_x86_and_goes_to_the_arm_instance() -> None:
    assert placed_on(lab(slot("x1", "x86"), slot("x2", "x86")), job("arm:1..")) == []
    assert placed_on(lab(slot("x1", "x86"), slot("a1", "arm")), job("arm:1..")) == ["a1"]
    assert placed_on(lab(slot("x1", "x86"), slot("a1", "arm")), job("x86:1..")) == ["x1"]
    assert placed_on(lab(slot("u1", None)), job("x86:1..")) == []
    assert placed_on(lab(slot("u1", None)), job("1..")) == ["u1"]
    assert placed_on(lab(slot("a1", "arm")), job(1)) == ["a1"]


def test_an_instance_not_yet_described_is_not_refused_for_its_architecture() -> None:
    # An elastic fleet's instance to be made (no hardware yet): its agent says once it runs.
    shape = InstanceSlot(name="lab-new-0", address="", total=Resources(cpu=8, memory=32), fleet="lab")
    assert isinstance(node_cost(shape, job("arm:1..").nodes[0]), tuple)
    assert lab(shape).never_fits(job("arm:1.."), "lab") is None


# --- never fits -----------------------------------------------------------------------------------------


def test_a_job_no_instance_could_ever_take_says_the_architecture() -> None:
    x86 = lab(slot("x1", "x86"), slot("x2", "x86"))
    assert x86.never_fits(job("arm:1.."), "lab") == "no instance of fleet lab has an arm CPU (they are x86)"
    assert x86.never_fits(job("x86:1.."), "lab") is None
    assert lab(slot("a1", "arm")).never_fits(job("x86:1.."), "lab") == (
        "no instance of fleet lab has an x86 CPU (it is arm)"
    )
    mixed = lab(slot("x1", "x86"), slot("u1", None))
    assert mixed.never_fits(job("arm:1.."), "lab") == (
        "no instance of fleet lab has an arm CPU (they are x86 or of an unknown architecture)"
    )


def test_another_reason_with_the_architecture_is_said_in_full() -> None:
    # One instance has the architecture but too few CPUs: the per-instance reasons say both.
    why = lab(slot("x1", "x86"), slot("a1", "arm")).never_fits(job("arm:64.."), "lab")
    assert why is not None and why.startswith("no instance of fleet lab can run it: ")
    assert "x1: needs 64.. CPUs, instance has 8; needs arm CPUs, instance has x86" in why
    assert "a1: needs 64.. CPUs, instance has 8" in why


def test_offer_says_never_with_the_architecture() -> None:
    answer = offer("lab", lab(slot("x1", "x86")), job("arm:1.."))
    assert [(one.fit, one.reasons) for one in answer.instances] == [
        (Fit.NEVER, ["needs arm CPUs, instance has x86"])
    ]
    assert answer.instances[0].described.startswith("cpu=x86:8 ")
    assert answer.never == "no instance of fleet lab has an arm CPU (it is x86)"


# --- what an agent reports ------------------------------------------------------------------------------

INFO = {
    "cpus": 8,
    "memory_bytes": 32 * 2**30,
    "disk_total_bytes": 100 * 2**30,
    "disk_free_bytes": 50 * 2**30,
    "gpus": [],
    "total": {"cpu": 8, "memory": 32},
    "free": {"cpu": 8, "memory": 32},
    "free_gpu_indices": [],
}


@pytest.mark.parametrize(
    ("reported", "arch"),
    [
        ({}, None),
        ({"cpu_arch": "x86"}, "x86"),
        ({"cpu_arch": "aarch64"}, "arm"),
        ({"cpu_arch": "riscv"}, None),
    ],
)
def test_an_agent_of_0_1_0_reports_no_architecture_and_is_unknown(reported: dict, arch: str | None) -> None:
    # 0.1.0's InstanceInfo has no cpu_arch: its answer still reads, as an unknown architecture.
    info = InstanceInfo.model_validate({**INFO, **reported})
    assert hardware_from_info(info).cpu_arch == arch


def test_known_arch_takes_the_usual_spellings() -> None:
    assert [known_arch(v) for v in ("x86_64", "AMD64", "arm64", "aarch64", "ppc64le", None)] == [
        "x86",
        "x86",
        "arm",
        "arm",
        None,
        None,
    ]
