"""`privileged: true` outside a container is a placement requirement (docs/containers.md#privileged): a job on
the host is a process of the agent's user, so it goes only to an instance whose agent runs as root, where
it has every privilege a privileged container would; in a container it is the container's --privileged and
asks nothing of the agent's user. Pure: no Temporal; the agent's report is read from this process."""

from __future__ import annotations

import os

from agent.instance import agent_uid
from core.configuration.loading import load_configuration_text
from core.fleets.matching import InstanceResources, privileged_shortfall
from core.fleets.offers import offer
from core.fleets.placement import InstanceSlot, hardware_from_info
from core.runs.submissions import replica_enqueue
from core.wire.agent_api import InstanceInfo, Resources
from core.wire.job_messages import NodeRequest, PlacementRequest
from tests.core.placement_lab import lab, placed_on

NOT_ROOT = (
    "privileged: true runs on the host only where the agent runs as root; instance's agent runs as uid 1000"
)
NOT_SAID = (
    "privileged: true runs on the host only where the agent runs as root; instance's agent does not say "
    "which user it runs as"
)


def hardware(uid: int | None) -> InstanceResources:
    return InstanceResources(cpus=8, memory_gb=32, disk_gb=100, agent_uid=uid)


def slot(name: str, uid: int | None, engine: str | None = None) -> InstanceSlot:
    return InstanceSlot(
        name=name,
        address="10.0.0.1",
        total=Resources(cpu=8, memory=32),
        fleet="lab",
        hardware=hardware(uid),
        container_engine=engine,
    )


def job(*, privileged: bool = True, container: bool = False) -> PlacementRequest:
    node = NodeRequest(
        job_id="r/j0", resources=Resources(cpu=1, memory=1), privileged=privileged, container=container
    )
    return PlacementRequest(request_id="r", nodes=[node])


def test_a_privileged_host_job_needs_an_agent_that_runs_as_root() -> None:
    assert privileged_shortfall(hardware(0)) is None
    assert privileged_shortfall(hardware(1000)) == NOT_ROOT
    assert privileged_shortfall(hardware(None)) == NOT_SAID  # an older agent


def test_a_privileged_host_job_goes_to_a_root_agent_and_says_so_when_none_is() -> None:
    assert placed_on(lab(slot("user", 1000), slot("root", 0)), job()) == ["root"]
    assert placed_on(lab(slot("user", 1000)), job(privileged=False)) == ["user"]
    state = lab(slot("user", 1000), slot("old", None))
    assert placed_on(state, job()) == []
    assert state.never_fits(job(), "lab") == (
        f"no instance of fleet lab can run it: old: {NOT_SAID}. user: {NOT_ROOT}"
    )
    answer = offer("lab", state, job())
    assert [(one.instance, one.reasons) for one in answer.instances] == [
        ("old", [NOT_SAID]),
        ("user", [NOT_ROOT]),
    ]
    assert answer.never == state.never_fits(job(), "lab")


def test_a_privileged_container_asks_nothing_of_the_agents_user() -> None:
    podman = slot("user", 1000, engine="podman 4.3.1")
    assert placed_on(lab(podman), job(container=True)) == ["user"]  # NodeRequest.privileged is for the host
    assert placed_on(lab(podman), job(privileged=False, container=True)) == ["user"]


def test_a_run_asks_for_a_root_agent_only_on_the_host() -> None:
    def nodes(text: str) -> list[tuple[bool, bool]]:
        configuration = load_configuration_text("type: task\ncommands: [x]\n" + text, "x.yml").configuration
        enqueue = replica_enqueue(
            configuration,  # type: ignore[arg-type]
            run_id="r",
            replica_num=0,
            submissions=[0, 0],
            job_workflow_ids=["w0", "w1"],
            priority=0,
        )
        return [(node.privileged, node.container) for node in enqueue.request.nodes]

    assert nodes("nodes: 2\nprivileged: true\n") == [(True, False), (True, False)]
    assert nodes("nodes: 2\n") == [(False, False), (False, False)]
    assert nodes("nodes: 2\nprivileged: true\nimage: busybox\n") == [(False, True), (False, True)]


def test_the_agent_reports_its_user_and_placement_reads_it() -> None:
    assert agent_uid() == os.geteuid()
    total = Resources(cpu=8, memory=32)
    info = InstanceInfo(
        cpus=8, memory_bytes=32 * 2**30, disk_total_bytes=100 * 2**30, disk_free_bytes=0, gpus=[],
        total=total, free=total, free_gpu_indices=[], agent_uid=0,
    )  # fmt: skip
    assert hardware_from_info(info).agent_uid == 0
    older = InstanceInfo.model_validate(info.model_dump(exclude={"agent_uid"}))
    assert older.agent_uid is None and hardware_from_info(older).agent_uid is None
