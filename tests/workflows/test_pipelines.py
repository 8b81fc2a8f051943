"""A pipeline's tasks in sequence (docs/pipelines.md), with the workflows and activity doubles: each task a
run of its own, started when the one before is done; a task that fails fails the pipeline and no later task
starts; a task's own retry applies within it; a stop stops the running task and starts no other."""

from __future__ import annotations

from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from core.configuration import TaskConfiguration
from core.configuration.specs import DependencyCondition
from core.runs.state_machine import replay_run
from core.status import RunStatus, RunTerminationReason
from core.wire.run_messages import DependencyTarget, PipelineInput, RunResult, StopRequest
from core.wire.workflow_ids import run_workflow_id
from tests.workflows.doubles import BLOCK, exited
from tests.workflows.harness import PROJECT, WORKFLOWS, Harness, configuration, named
from workflows.pipeline import PipelineWorkflow

FIRST = (0, 0, 0)
RETRY = {"retry": {"on_events": ["error"], "duration": "1h"}}


async def start_pipeline(harness: Harness, *tasks: TaskConfiguration) -> WorkflowHandle[Any, RunResult]:
    await harness.start_fleet("local")
    now = await harness.env.get_current_time()
    inp = PipelineInput(
        run_id="pipe-0001",
        project=PROJECT,
        run_name="pipe",
        user="tester",
        tasks=list(tasks),
        fleets=["local"] * len(tasks),
        submitted_at=now.timestamp(),
    )
    return await harness.client.start_workflow(
        PipelineWorkflow.run, inp, id=run_workflow_id(PROJECT, "pipe"), task_queue=harness.queue
    )


def task(**fields: Any) -> TaskConfiguration:
    conf = configuration("task", **fields)
    assert isinstance(conf, TaskConfiguration)
    return conf


async def test_three_tasks_run_in_turn_and_the_second_retries_within_itself(harness: Harness) -> None:
    harness.backend.run_watch_script = {"pipe-0001-t2": {FIRST: exited(1)}}  # its submission 1 exits 0
    handle = await start_pipeline(harness, task(), task(**RETRY), task())
    result = await harness.result(handle)
    assert result.status == RunStatus.DONE
    assert [t.task_num for t in harness.backend.pipeline_tasks] == [1, 2, 3]
    events = harness.run_events("pipe-0001")
    assert [e.context["task"] for e in named(events, "task-start")] == [1, 2, 3]
    assert [e.context["status"] for e in named(events, "task-end")] == ["done", "done", "done"]
    state = replay_run(events)
    assert (state.task, state.tasks, state.status) == (3, 3, RunStatus.DONE)
    second = harness.run_events("pipe-0001-t2")
    assert len(named(second, "retry")) == 1 and len(named(second, "job-submit")) == 2
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    for workflow_id in [handle.id, *(f"{handle.id}/task-{n}" for n in (1, 2, 3))]:
        await replayer.replay_workflow(await harness.client.get_workflow_handle(workflow_id).fetch_history())


async def test_a_failed_task_fails_the_pipeline_and_no_later_task_starts(harness: Harness) -> None:
    harness.backend.run_watch_script = {"pipe-0001-t2": {FIRST: exited(3)}}
    handle = await start_pipeline(harness, task(), task(), task())
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    assert [t.task_num for t in harness.backend.pipeline_tasks] == [1, 2]
    state = replay_run(harness.run_events("pipe-0001"))
    assert (state.task, state.tasks) == (2, 3)
    assert "pipe-0001-t3" not in harness.backend.runs


async def test_a_stop_stops_the_running_task_and_no_later_one_starts(harness: Harness) -> None:
    harness.backend.run_watch_script = {"pipe-0001-t2": {FIRST: BLOCK}}
    handle = await start_pipeline(harness, task(), task(), task())
    await harness.wait_until("task 2 running", lambda: _status(harness, "pipe-0001-t2") == "running")
    await harness.wait_until("the pipeline running", lambda: _status(harness, "pipe-0001") == "running")
    await handle.execute_update(PipelineWorkflow.stop, StopRequest())
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.STOPPED_BY_USER,
    )
    assert _status(harness, "pipe-0001-t2") == "terminated"
    assert [t.task_num for t in harness.backend.pipeline_tasks] == [1, 2]


def _status(harness: Harness, run_id: str) -> str | None:
    log = harness.backend.runs.get(run_id)
    return None if log is None else log.status


async def test_a_run_waits_for_a_pipeline_as_for_any_run(harness: Harness) -> None:
    harness.backend.run_watch_script = {"pipe-0001-t1": {FIRST: BLOCK}}
    pipeline = await start_pipeline(harness, task(), task())
    await harness.wait_until("task 1 running", lambda: _status(harness, "pipe-0001-t1") == "running")
    target = DependencyTarget(
        run_name="pipe", condition=DependencyCondition.DONE, run_id="pipe-0001", workflow_id=pipeline.id
    )
    after = await harness.start(task(), name="after", dependencies=[target])
    # Stored at once as waiting, though no job of its own will report.
    await harness.wait_until("after waiting", lambda: _status(harness, "after-0001") == "pending")
    harness.backend.finish_watch(FIRST, exited(0))
    assert (await harness.result(pipeline)).status == RunStatus.DONE
    assert (await harness.result(after)).status == RunStatus.DONE
    assert [e.name for e in harness.run_events("after-0001")][3:5] == ["dependency-remove", "depend"]
