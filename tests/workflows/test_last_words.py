"""A job's last word comes with its workflow's result (docs/jobs.md#the-last-word): no signal of the job's
own, one signal and one workflow task fewer for its run. A run submitted before hears it by signal, as it
did; a run that continues as new has its running jobs send it by signal."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle, WorkflowHistory

from core.status import JobStatus, RunStatus, RunTerminationReason
from core.wire import revisions
from core.wire.job_messages import JobEnding
from core.wire.run_messages import RunResult
from core.wire.workflow_ids import job_workflow_id, run_workflow_id
from tests.workflows.doubles import BLOCK, exited
from tests.workflows.harness import POLL, PROJECT, WAIT_LIMIT, Harness, configuration
from tests.workflows.test_local_hot_path import signals_sent
from tests.workflows.test_run_continue_as_new import check_continued_log, executions
from workflows.last_words import LAST_WORD_BY_SIGNAL
from workflows.run import RunWorkflow

JOB = (0, 0, 0)
_SIGNALED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
_MARKER = EventType.EVENT_TYPE_MARKER_RECORDED


def patches_asked(history: WorkflowHistory) -> int:
    """The patch markers in a history (each came with a `TemporalChangeVersion` search attribute update)."""
    markers = [e.marker_recorded_event_attributes for e in history.events if e.event_type == _MARKER]
    return sum(1 for marker in markers if marker.marker_name == "core_patch")


def signals_heard(history: WorkflowHistory) -> list[str]:
    return [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history.events
        if e.event_type == _SIGNALED
    ]


async def start(
    harness: Harness, conf: Any, *, revision: int = revisions.CURRENT, continuing: bool = False
) -> WorkflowHandle[Any, RunResult]:
    inp = await harness.run_input(conf)
    inp = inp.model_copy(update={"revision": revision, "continue_as_new_each_step": continuing})
    return await harness.client.start_workflow(
        RunWorkflow.run, inp, id=run_workflow_id(PROJECT, inp.run_name), task_queue=harness.queue
    )


async def job_ending(harness: Harness, run: WorkflowHandle[Any, Any], key: tuple[int, int, int] = JOB) -> Any:
    job = harness.client.get_workflow_handle(job_workflow_id(run.id, *key), result_type=JobEnding)
    return job, await job.result()


async def test_the_last_word_comes_with_the_jobs_result(harness: Harness) -> None:
    handle = await start(harness, configuration())
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.DONE, RunTerminationReason.ALL_JOBS_DONE)
    job, ending = await job_ending(harness, handle)
    assert isinstance(ending, JobEnding) and ending.last_word is not None
    assert ending.last_word.status == JobStatus.DONE and ending.last_word.exit_status == 0
    job_history, run_history = await job.fetch_history(), await handle.fetch_history()
    assert signals_sent(job_history) == []  # its news before went by local activity
    # The run heard one signal: the job's news that it runs; its end came with the result.
    assert signals_heard(run_history) == ["job_update"]
    # The patches before its revision are taken without a marker (workflows/patches.py).
    assert patches_asked(job_history) == patches_asked(run_history) == 0
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)


async def test_a_failed_jobs_last_word_comes_with_its_failure(harness: Harness) -> None:
    harness.backend.watch_script = {JOB: exited(3)}
    handle = await start(harness, configuration())
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    job = harness.client.get_workflow_handle(job_workflow_id(handle.id, *JOB))
    assert signals_sent(await job.fetch_history()) == []
    assert signals_heard(await handle.fetch_history()) == ["job_update"]
    [done] = [e for e in harness.job_events(JOB) if e.name == "clean"]
    assert done.context["status"] == "failed"
    await harness.check_eventlogs_replay(handle)


async def test_a_run_submitted_before_hears_the_last_word_by_signal(harness: Harness) -> None:
    handle = await start(harness, configuration(), revision=0)
    assert (await harness.result(handle)).status == RunStatus.DONE
    job, ending = await job_ending(harness, handle)
    assert ending.last_word is None
    job_history, run_history = await job.fetch_history(), await handle.fetch_history()
    assert signals_sent(job_history) == ["job_update"]
    assert signals_heard(run_history) == ["job_update", "job_update"]
    # It asks for its patches, as it did: retry-window (the run), local-hot-path and short-job-history.
    assert (patches_asked(run_history), patches_asked(job_history)) == (1, 2)
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)


async def test_a_run_continuing_as_new_has_its_running_jobs_send_the_last_word(harness: Harness) -> None:
    backend = harness.backend
    backend.watch_script = {JOB: BLOCK}
    handle = await start(harness, configuration(), continuing=True)
    await harness.wait_until(
        "the job to run",
        lambda: (job := backend.jobs.get(JOB)) is not None and job.status == JobStatus.RUNNING.value,
    )
    job = harness.client.get_workflow_handle(job_workflow_id(handle.id, *JOB))
    deadline = time.monotonic() + WAIT_LIMIT
    while LAST_WORD_BY_SIGNAL not in signals_heard(await job.fetch_history()):
        assert time.monotonic() < deadline, "the job never heard that its run continues as new"
        await asyncio.sleep(POLL)
    backend.finish_watch(JOB, exited(0))
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.DONE, RunTerminationReason.ALL_JOBS_DONE)
    _, ending = await job_ending(harness, handle)
    assert ending.last_word is None
    assert signals_sent(await job.fetch_history()) == ["job_update"]
    assert await executions(handle) >= 2
    await check_continued_log(harness, handle, result)
