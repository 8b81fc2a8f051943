"""What the Temporal Web UI shows of runs and jobs (docs/runs.md#the-web-ui), on the time-skipping test
server: a FAILED run's (and job's, and pipeline's) workflow fails with why, any other completes; every
run and job keeps current details; histories recorded before the rule still replay (`workflow.patched`).
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from core.status import RunStatus, RunTerminationReason
from core.web_ui import JOB_FAILED, RUN_FAILED
from core.wire.workflow_ids import job_workflow_id
from tests.workflows.doubles import BLOCK, exited
from tests.workflows.harness import WORKFLOWS, Harness, configuration, named
from tests.workflows.test_pipelines import start_pipeline, task

FIRST = (0, 0, 0)
RETRY_ON_ERROR = {"on_events": ["error"], "duration": "1h"}
FAILED = WorkflowExecutionStatus.FAILED
COMPLETED = WorkflowExecutionStatus.COMPLETED


async def current_details(handle: WorkflowHandle[Any, Any]) -> str:
    """What the Web UI shows as the workflow's current details (it asks the workflow, as this does)."""
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


def job(
    harness: Harness, run: WorkflowHandle[Any, Any], key: tuple[int, int, int]
) -> WorkflowHandle[Any, Any]:
    return harness.client.get_workflow_handle(job_workflow_id(run.id, *key))


async def failure(handle: WorkflowHandle[Any, Any]) -> ApplicationError:
    with pytest.raises(WorkflowFailureError) as raised:
        await handle.result()
    assert isinstance(raised.value.cause, ApplicationError)
    return raised.value.cause


async def test_a_failed_run_fails_its_workflow_with_why(harness: Harness) -> None:
    harness.backend.watch_script = {FIRST: exited(3)}
    handle = await harness.start(configuration())
    result = await harness.result(handle)  # its RunResult, from the failure's details
    assert (result.status, result.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    assert (await handle.describe()).status == FAILED
    cause = await failure(handle)
    assert (cause.type, cause.non_retryable) == (RUN_FAILED, True)
    assert cause.message == "failed (job failed): job 0 exited (3)"
    # Its job's workflow failed too, with the job's own words; the run took its end as it always did.
    job_cause = await failure(job(harness, handle, FIRST))
    assert (job_cause.type, job_cause.message) == (JOB_FAILED, "failed (exited (3))")
    assert "**status** failed (job failed): job 0 exited (3)" in await current_details(handle)
    assert await current_details(job(harness, handle, FIRST)) == "**status** failed (exited (3))"
    described = await job(harness, handle, FIRST).describe()  # its user metadata, from its run's start
    assert await described.static_summary() == "task train: replica 0, job 0, submission 0"
    assert "node 0 of 1" in (await described.static_details() or "")
    assert len(named(harness.run_events(), "clean")) == 1  # its final status, stored once
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)


async def test_a_done_run_completes_and_shows_its_status(harness: Harness) -> None:
    harness.backend.watch_script = {FIRST: BLOCK}
    handle = await harness.start(configuration())
    await harness.wait_for(handle, "the run to run", lambda s: s.status == RunStatus.RUNNING)
    details = await current_details(handle)
    assert details.splitlines()[:3] == [
        "- task train: nodes 1; cpu=0.. mem=0GB.. disk=0GB..",
        "- **status** running",
        "- **job 0** running",
    ]
    assert await current_details(job(harness, handle, FIRST)) == "**status** running on local"
    harness.backend.finish_watch(FIRST, exited(0))
    result = await harness.result(handle)
    assert result.status == RunStatus.DONE
    assert (await handle.describe()).status == COMPLETED
    assert (await job(harness, handle, FIRST).describe()).status == COMPLETED
    assert "**status** done (all jobs done)" in await current_details(handle)
    await harness.check_histories_replay(handle)


async def test_a_stopped_run_completes_terminated(harness: Harness) -> None:
    """A stop is the user's wish, no failure: the workflow completes, its details say so."""
    harness.backend.watch_script = {FIRST: BLOCK}
    handle = await harness.start(configuration())
    await harness.wait_for(handle, "the run to run", lambda s: s.status == RunStatus.RUNNING)
    await harness.stop(handle)
    result = await handle.result()
    assert (result.status, result.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.STOPPED_BY_USER,
    )
    assert (await handle.describe()).status == COMPLETED
    assert (await job(harness, handle, FIRST).describe()).status == COMPLETED
    assert "**status** terminated (stopped by user)" in await current_details(handle)
    await harness.check_histories_replay(handle)


async def test_a_failed_job_retried_leaves_a_done_run(harness: Harness) -> None:
    """The run does not await its jobs' workflows: a failed one is news like any other."""
    harness.backend.watch_script = {FIRST: exited(1)}  # its submission 1 exits 0
    handle = await harness.start(configuration(retry=RETRY_ON_ERROR))
    result = await harness.result(handle)
    assert result.status == RunStatus.DONE
    assert (await handle.describe()).status == COMPLETED
    assert (await job(harness, handle, FIRST).describe()).status == FAILED
    assert (await job(harness, handle, (0, 0, 1)).describe()).status == COMPLETED
    await harness.check_histories_replay(handle)


async def test_a_pipeline_whose_task_failed_fails(harness: Harness) -> None:
    harness.backend.run_watch_script = {"pipe-0001-t1": {FIRST: exited(2)}}
    handle = await start_pipeline(harness, task(), task())
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    cause = await failure(handle)
    assert (cause.type, cause.message) == (RUN_FAILED, "failed (task 1 of 2: job failed)")
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    await replayer.replay_workflow(await handle.fetch_history())


# --- histories recorded before the rule ------------------------------------------------------------


def release_before_the_rule(mp: pytest.MonkeyPatch) -> None:
    """`workflow.patched` as a release before the patch knew it: False, and no marker recorded; the
    workflows then end as they did before the rule, completing whatever their status."""
    mp.setattr(workflow, "patched", lambda _id: False)


async def test_histories_recorded_before_the_rule_replay(harness: Harness) -> None:
    """A FAILED run's and job's histories as an earlier release recorded them (completed, no patch marker)
    replay on today's workflows, which complete there as they did; unguarded, the rule would break them."""
    harness.backend.watch_script = {FIRST: exited(3)}
    with pytest.MonkeyPatch.context() as mp:
        release_before_the_rule(mp)
        handle = await harness.start(configuration())
        result = await handle.result()
        assert result.status == RunStatus.FAILED
        run_job = job(harness, handle, FIRST)
        assert [(await h.describe()).status for h in (handle, run_job)] == [COMPLETED, COMPLETED]
        histories = [await handle.fetch_history(), await run_job.fetch_history()]
    today = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    for history in histories:
        await today.replay_workflow(history)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(workflow, "patched", lambda _id: True)  # the rule without its guard
        for history in histories:
            with pytest.raises(workflow.NondeterminismError):
                await today.replay_workflow(history)
