"""An instance is seen as it is now (docs/fleets.md#what-an-instance-is): the local fleet watches what its
agent says the instance is, and places on what it says now (a container engine where there was none);
a fleet begun before the patch `instance-descriptions` replays and does not watch."""

from __future__ import annotations

from core.fleets.messages import InstanceChange
from core.fleets.placement import InstanceSlot, InstanceStatus
from core.status import RunStatus, RunTerminationReason
from core.wire.agent_api import Resources
from core.wire.workflow_ids import LOCAL_FLEET, LOCAL_INSTANCE
from tests.workflows.doubles import LOCAL_CPUS
from tests.workflows.harness import Harness, check_patch_guards, configuration, without_patch
from workflows import fleet as fleet_workflow

LOCAL_TOTAL = Resources(cpu=LOCAL_CPUS, memory=256)


async def test_an_image_runs_locally_once_the_agent_says_it_has_an_engine(harness: Harness) -> None:
    backend = harness.backend
    first = await harness.start(configuration(image="busybox"), name="before")
    result = await harness.result(first)
    assert (result.status, result.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    assert {log.reason for log in backend.jobs.values()} == {"failed_to_start_due_to_no_capacity"}
    await harness.wait_until("the local instance watched", lambda: bool(backend.local_watches))

    slot = InstanceSlot(
        name=LOCAL_INSTANCE, address="127.0.0.1", total=LOCAL_TOTAL, blocks=None, fleet=LOCAL_FLEET
    )  # as the double's local_instance describes it
    assert backend.local_watches[0].described == slot.description_key()
    now = slot.model_copy(update={"container_engine": "podman 4.3.1", "agent_release": "0.25.0"})
    backend.report_health(InstanceChange(name=LOCAL_INSTANCE, status=InstanceStatus.READY, slot=now))
    # The watch starts again, told what the instance is now.
    await harness.wait_until("the watch told the new description", lambda: len(backend.local_watches) == 2)
    assert backend.local_watches[-1].described == now.description_key() != slot.description_key()

    second = await harness.start(configuration(image="busybox"), name="after")
    result = await harness.result(second)
    assert result.status == RunStatus.DONE
    recorded = lambda: backend.fleet_records[LOCAL_FLEET].instances[0]  # noqa: E731
    await harness.wait_until("the record to say so", lambda: recorded().container_engine == "podman 4.3.1")
    assert recorded().agent_release == "0.25.0"
    await harness.check_histories_replay(second)


async def test_local_fleet_histories_from_before_instance_descriptions_replay(harness: Harness) -> None:
    with without_patch(fleet_workflow._DESCRIBED):
        handle = await harness.start(configuration(), name="old")
        await harness.result(handle)
        history = await harness.fleet(LOCAL_FLEET).fetch_history()
    assert harness.backend.local_watches == []
    await check_patch_guards(history, fleet_workflow._DESCRIBED)
