"""`resources.shm_size` outside a container is a placement requirement (docs/containers.md#resourcesshm_size):
a job on the host shares its host's /dev/shm, so it goes only to an instance whose agent reports one at
least that large; in a container it is the container's --shm-size and asks nothing of the host. Pure: no
Temporal; the agent's report is read from this machine."""

from __future__ import annotations

from pathlib import Path

from agent.instance import shm_bytes
from core.configuration.resources import ResourcesSpec
from core.fleets.matching import InstanceResources, shortfalls
from core.fleets.placement import InstanceSlot, hardware_from_info
from core.wire.agent_api import BYTES_PER_GB, InstanceInfo, Resources
from core.wire.job_messages import NodeRequest, PlacementRequest
from tests.core.placement_lab import lab, placed_on

SPEC = ResourcesSpec.model_validate({"cpu": "1..", "memory": "1GB..", "disk": "1GB..", "shm_size": "16GB"})


def hardware(shm_gb: float | None) -> InstanceResources:
    return InstanceResources(cpus=8, memory_gb=32, disk_gb=100, shm_gb=shm_gb)


def slot(name: str, shm_gb: float | None) -> InstanceSlot:
    return InstanceSlot(
        name=name,
        address="10.0.0.1",
        total=Resources(cpu=8, memory=32),
        fleet="lab",
        hardware=hardware(shm_gb),
    )


def job(*, container: bool = False) -> PlacementRequest:
    node = NodeRequest(job_id="r/j0", resources=Resources(cpu=1, memory=1), spec=SPEC, container=container)
    return PlacementRequest(request_id="r", nodes=[node])


def test_a_host_job_needs_a_dev_shm_at_least_its_shm_size() -> None:
    assert shortfalls(hardware(31.4), SPEC, host=True) == {}
    assert shortfalls(hardware(16 - 1 / 4096), SPEC, host=True) == {}  # a tmpfs of 16g, as df counts it
    assert shortfalls(hardware(7.8), SPEC, host=True) == {
        "shm_size": "needs 16GB of /dev/shm on the host, instance has 7.8GB"
    }
    assert shortfalls(hardware(None), SPEC, host=True) == {
        "shm_size": "needs 16GB of /dev/shm on the host, instance reports no /dev/shm"
    }


def test_a_container_job_or_one_without_shm_size_asks_nothing_of_the_host() -> None:
    assert shortfalls(hardware(None), SPEC) == {}  # host=False: the container's own --shm-size
    plain = SPEC.model_copy(update={"shm_size": None})
    assert shortfalls(hardware(None), plain, host=True) == {}


def test_a_host_job_goes_to_the_instance_with_enough_dev_shm_and_says_so_when_none_has() -> None:
    assert placed_on(lab(slot("small", 7.8), slot("big", 62.0)), job()) == ["big"]
    assert placed_on(lab(slot("small", 7.8)), job(container=True)) == []  # no container engine there
    state = lab(slot("small", 7.8), slot("old", None))
    assert placed_on(state, job()) == []
    assert state.never_fits(job(), "lab") == (
        "no instance of fleet lab can run it: old: needs 16GB of /dev/shm on the host, instance reports no "
        "/dev/shm. small: needs 16GB of /dev/shm on the host, instance has 7.8GB"
    )


def test_the_agent_reports_its_dev_shm_and_placement_reads_it(tmp_path: Path) -> None:
    here = shm_bytes()
    assert here is None or here > 0
    assert shm_bytes(str(tmp_path / "none")) is None
    total = Resources(cpu=8, memory=32)
    info = InstanceInfo(
        cpus=8, memory_bytes=32 * 2**30, disk_total_bytes=100 * 2**30, disk_free_bytes=0, gpus=[],
        total=total, free=total, free_gpu_indices=[], shm_bytes=16 * 2**30,
    )  # fmt: skip
    assert hardware_from_info(info).shm_gb == 16 * 2**30 / BYTES_PER_GB
    assert hardware_from_info(info.model_copy(update={"shm_bytes": None})).shm_gb is None
