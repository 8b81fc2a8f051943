"""Runs that wait for others (docs/dependencies.md), with the workflows and activity doubles: the waiting
run is PENDING until the run it waits for is told to tell it, and starts when it is done; it fails at once
when the run it waits for ended otherwise, or does not exist; a stop ends it while it waits. The watch is
the real activity over the doubles' stored eventlogs, so the runs tell each other through the test server.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import WorkflowHandle

from core.configuration.specs import DependencyCondition
from core.status import RunStatus, RunTerminationReason
from core.wire.run_messages import DependencyTarget
from core.wire.workflow_ids import run_workflow_id
from tests.workflows.doubles import BLOCK, exited
from tests.workflows.harness import PROJECT, Harness, configuration, named

FIRST = (0, 0, 0)


def on(name: str, condition: str = "done", exists: bool = True) -> list[DependencyTarget]:
    return [
        DependencyTarget(
            run_name=name,
            condition=DependencyCondition(condition),
            run_id=f"{name}-0001" if exists else None,
            workflow_id=run_workflow_id(PROJECT, name) if exists else None,
        )
    ]


def names_of(harness: Harness, run_id: str) -> list[str]:
    return [e.name for e in harness.run_events(run_id) if e.name not in ("job-status", "job-finish")]


async def waiting(harness: Harness, handle: WorkflowHandle[Any, Any]) -> None:
    await harness.wait_for(handle, "waiting", lambda s: s.status == RunStatus.PENDING and bool(s.waiting_for))


async def test_a_run_starts_once_the_run_it_waits_for_is_done(harness: Harness) -> None:
    harness.backend.watch_script = {FIRST: BLOCK}
    prep = await harness.start(configuration("task"), name="prep")
    await harness.wait_for(prep, "prep running", lambda s: s.status == RunStatus.RUNNING)
    train = await harness.start(configuration("task"), name="train", dependencies=on("prep"))
    await waiting(harness, train)
    assert len(harness.backend.called("prepare_task")) == 1  # prep's only: train waits

    harness.backend.finish_watch(FIRST, exited(0))
    assert (await harness.result(prep)).status == RunStatus.DONE
    assert (await harness.result(train)).status == RunStatus.DONE
    assert names_of(harness, "train-0001")[:6] == [
        "submit",
        "dependency-add",
        "status",
        "dependency-remove",
        "depend",
        "status",
    ]
    [add] = named(harness.run_events("train-0001"), "dependency-add")
    assert add.context == {
        "description": "prep:done",
        "run": "prep",
        "condition": "done",
        "run_id": "prep-0001",
    }
    await harness.check_histories_replay(train)


async def test_started_is_met_while_the_run_waited_for_still_runs(harness: Harness) -> None:
    harness.backend.watch_script = {FIRST: BLOCK}
    server = await harness.start(configuration("task"), name="server")
    client = await harness.start(configuration("task"), name="client", dependencies=on("server", "started"))
    await harness.wait_for(client, "client submitted", lambda s: s.submissions == 1)
    assert (await harness.describe(server)).state.status == RunStatus.RUNNING
    await harness.stop(server)
    await harness.result(server)


async def test_a_run_fails_at_once_when_the_run_it_waits_for_failed(harness: Harness) -> None:
    harness.backend.watch_script = {FIRST: exited(3)}
    prep = await harness.start(configuration("task"), name="prep")
    assert (await harness.result(prep)).status == RunStatus.FAILED
    train = await harness.start(configuration("task"), name="train", dependencies=on("prep"))
    result = await harness.result(train)
    assert (result.status, result.termination_reason) == (
        RunStatus.FAILED,
        RunTerminationReason.DEPENDENCY_FAILED,
    )
    [exception] = named(harness.run_events("train-0001"), "exception", type="depend")
    assert exception.context["note"] == (
        "run prep ended failed (job failed); this run waited for it to be done"
    )
    assert harness.backend.called("prepare_task") == [harness.backend.called("prepare_task")[0]]


async def test_failed_is_met_by_a_failure(harness: Harness) -> None:
    harness.backend.watch_script = {FIRST: BLOCK}
    prep = await harness.start(configuration("task"), name="prep")
    cleanup = await harness.start(configuration("task"), name="cleanup", dependencies=on("prep", "failed"))
    await waiting(harness, cleanup)
    harness.backend.finish_watch(FIRST, exited(1))
    assert (await harness.result(prep)).status == RunStatus.FAILED
    # cleanup's own job (0, 0, 0) finds the first one's end in the doubles: it only has to start.
    await harness.wait_for(cleanup, "cleanup submitted", lambda s: s.submissions == 1)


async def test_a_run_waiting_for_a_run_that_does_not_exist_fails_at_once(harness: Harness) -> None:
    train = await harness.start(configuration("task"), name="train", dependencies=on("ghost", exists=False))
    result = await harness.result(train)
    assert result.termination_reason == RunTerminationReason.DEPENDENCY_FAILED
    assert names_of(harness, "train-0001") == ["submit", "dependency-add", "exception", "status", "clean"]
    assert harness.backend.called("prepare_task") == []


async def test_a_waiting_run_is_stopped_and_the_run_it_waited_for_goes_on(harness: Harness) -> None:
    harness.backend.watch_script = {FIRST: BLOCK}
    prep = await harness.start(configuration("task"), name="prep")
    train = await harness.start(configuration("task"), name="train", dependencies=on("prep"))
    await waiting(harness, train)
    await harness.stop(train)
    assert (await harness.result(train)).status == RunStatus.TERMINATED
    harness.backend.finish_watch(FIRST, exited(0))
    assert (await harness.result(prep)).status == RunStatus.DONE  # telling an ended watcher is no error
