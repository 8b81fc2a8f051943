"""A job's volumes (docs/volumes.md) through RunWorkflow, JobWorkflow and FleetWorkflow, with the attach
and detach activities replaced by doubles: what each job mounts and attaches, where it is placed, and
detach (docs/jobs.md#step-5-clean-up): a job stays TERMINATING, its capacity held, until its volumes are
detached."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.exceptions import ApplicationError

from core.jobs.state_machine import replay_job
from core.status import JobStatus, RunStatus, RunTerminationReason
from core.wire import activity_names as names
from core.wire.run_messages import RunResult
from core.wire.volumes import JobVolume
from core.wire.workflow_ids import run_workflow_id
from tests.workflows.doubles import BLOCK
from tests.workflows.harness import POLL, PROJECT, WAIT_LIMIT, Harness, configuration, named
from tests.workflows.test_fleet_placement import FLEET, check_logs, lab
from workflows.run import RunWorkflow

LOCAL_VOLUMES = {"data": "local"}


async def start(
    harness: Harness, conf: Any, volume_instances: dict[str, str], fleet: str = "local"
) -> WorkflowHandle[Any, RunResult]:
    """A run whose volumes were found at submission on these instances (as FerryAPI resolves them)."""
    inp = await harness.run_input(conf, fleet=fleet)
    return await harness.client.start_workflow(
        RunWorkflow.run,
        inp.model_copy(update={"volume_instances": volume_instances}),
        id=run_workflow_id(PROJECT, inp.run_name),
        task_queue=harness.queue,
    )


async def fleet_idle(harness: Harness) -> None:
    """Until the local fleet has every capacity back (the job's release signal may trail its result)."""
    deadline = time.monotonic() + WAIT_LIMIT
    while not (await harness.describe_fleet()).idle:
        assert time.monotonic() < deadline, "the fleet never got its capacity back"
        await asyncio.sleep(POLL)


async def test_each_node_mounts_its_own_volume_and_detaches_it_after_its_task_is_removed(
    harness: Harness,
) -> None:
    volumes = ["data-${{ dstack.node_rank }}:/data", {"instance_path": "~/cache", "path": "/cache"}]
    conf = configuration(nodes=2, volumes=volumes)
    handle = await start(harness, conf, {"data-0": "local", "data-1": "local"})
    assert (await harness.result(handle)).status == RunStatus.DONE
    backend = harness.backend
    for node in (0, 1):
        key = (0, node, 0)
        [attach] = backend.called(names.ATTACH_VOLUMES, key)
        assert (attach.names, attach.instance_name, attach.project) == ([f"data-{node}"], "local", PROJECT)
        [prepare] = backend.called(names.PREPARE_TASK, key)
        assert prepare.volumes == [
            JobVolume(path="/data", name=f"data-{node}", project=PROJECT),
            JobVolume(path="/cache", instance_path="~/cache"),
        ]
        # Attached before the task is submitted; detached once it is removed, before the capacity goes.
        order = [name for name, k, _ in backend.calls if k == key]
        assert order.index(names.ATTACH_VOLUMES) < order.index(names.PREPARE_TASK)
        assert order.index(names.RELEASE_TASK) < order.index(names.DETACH_VOLUMES)
    await check_logs(harness, handle)


async def test_a_job_with_instance_volumes_only_attaches_and_detaches_nothing(harness: Harness) -> None:
    handle = await start(harness, configuration(volumes=["/scratch:/scratch"]), {})
    assert (await harness.result(handle)).status == RunStatus.DONE
    [prepare] = harness.backend.called(names.PREPARE_TASK)
    assert prepare.volumes == [JobVolume(path="/scratch", instance_path="/scratch")]
    assert harness.backend.called(names.ATTACH_VOLUMES) == []
    assert harness.backend.called(names.DETACH_VOLUMES) == []


async def test_a_volume_that_cannot_be_attached_fails_the_job_before_it_starts(harness: Harness) -> None:
    def missing() -> ApplicationError:
        message = "volume data does not exist in project 'test' (see ferry volume list)"
        return ApplicationError(message, type="VOLUME_ERROR", non_retryable=True)

    harness.backend.attach_script[(0, 0, 0)] = missing
    handle = await start(harness, configuration(volumes=["data:/data"]), {})
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    job = harness.backend.jobs[(0, 0, 0)]
    assert (job.status, job.reason) == ("failed", "volume_error")
    [exception] = named(harness.job_events((0, 0, 0)), "exception", severity=0)
    assert "volume data does not exist" in exception.context["note"]
    assert harness.backend.called(names.PREPARE_TASK) == [] and harness.backend.called(names.START_JOB) == []
    await check_logs(harness, handle)


async def test_a_failing_detach_keeps_the_job_terminating_and_its_capacity_held_until_it_succeeds(
    harness: Harness,
) -> None:
    backend = harness.backend
    key = (0, 0, 0)
    backend.detach_broken.add(key)
    handle = await start(harness, configuration(volumes=["data:/data"]), LOCAL_VOLUMES)
    await harness.wait_until("detach to be retried", lambda: len(backend.called(names.DETACH_VOLUMES)) >= 3)
    so_far = (await harness.describe_job(handle, key)).events
    assert replay_job(so_far).status == JobStatus.TERMINATING
    assert named(so_far, "release") != [] and named(so_far, "free") == []  # its task is removed already
    [local] = (await harness.describe_fleet()).instances
    assert local.jobs == ["train-0001-r0-j0-s0"]  # its capacity is still held
    backend.detach_broken.clear()
    assert (await harness.result(handle)).status == RunStatus.DONE
    await fleet_idle(harness)
    events = harness.job_events(key)
    assert [e.name for e in events][-2:] == ["free", "clean"]
    await check_logs(harness, handle)


async def test_a_job_is_placed_on_the_instance_of_its_volume(harness: Harness) -> None:
    await harness.start_fleet(FLEET, lab(3))
    handle = await start(harness, configuration(volumes=["data:/data"]), {"data": "lab-2"}, fleet=FLEET)
    assert (await harness.result(handle)).status == RunStatus.DONE
    [prepare] = harness.backend.called(names.PREPARE_TASK)
    assert prepare.instance_name == "lab-2"


async def test_a_volume_on_no_instance_of_the_fleet_is_refused_placement(harness: Harness) -> None:
    await harness.start_fleet(FLEET, lab(2))
    handle = await start(harness, configuration(volumes=["data:/data"]), {"data": "lab-7"}, fleet=FLEET)
    result = await harness.result(handle)
    assert result.status == RunStatus.FAILED
    [exception] = named(harness.job_events((0, 0, 0)), "exception", severity=0)
    assert "its volumes are on instance lab-7" in exception.context["note"]
    assert harness.backend.called(names.ATTACH_VOLUMES) == []


async def test_a_stop_while_running_detaches_after_the_task_is_removed(harness: Harness) -> None:
    backend = harness.backend
    backend.watch_script = {(0, 0, 0): BLOCK}
    handle = await start(harness, configuration(volumes=["data:/data"]), LOCAL_VOLUMES)
    await harness.wait_until("the job to run", lambda: bool(backend.called(names.WATCH_JOB)))
    assert backend.called(names.DETACH_VOLUMES) == []  # attached while it runs
    await harness.stop(handle)
    assert (await harness.result(handle)).status == RunStatus.TERMINATED
    order = [name for name, _, _ in backend.calls]
    assert order.index(names.STOP_TASK) < order.index(names.RELEASE_TASK) < order.index(names.DETACH_VOLUMES)
