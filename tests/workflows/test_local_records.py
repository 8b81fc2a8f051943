"""A run's store writes as local activities that no step waits for (workflows/run_records.py,
docs/runs.md#the-store): the store ends with the run's whole eventlog, and the histories replay, however
late a write's end is heard."""

from __future__ import annotations

from datetime import timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from core.status import RunStatus
from core.wire import activity_names as names
from core.wire.workflow_ids import run_workflow_id
from tests.workflows.doubles import exited
from tests.workflows.harness import PROJECT, Harness, configuration, without_patch
from tests.workflows.test_run_continue_as_new import (
    RETRY_ON_ERROR,
    check_continued_log,
    execution_histories,
)
from tests.workflows.test_short_job_history import activities_in
from workflows.run import RunWorkflow

LOCAL_ACTIVITY = "core_local_activity"  # the SDK's marker


def local_writes_in(history: WorkflowHistory) -> int:
    """The local activities' markers of a history (each a store write of the run's)."""
    markers = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    return sum(1 for e in markers if e.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY)


async def test_a_runs_writes_are_local_but_the_last(harness: Harness) -> None:
    handle = await harness.start(configuration())
    assert (await harness.result(handle)).status == "done"
    run = await handle.fetch_history()
    # Its first write (the submission's events with the job's first news) went from the step's own task;
    # the one that finished the run by a regular activity it waited for.
    assert local_writes_in(run) >= 1 and harness.backend.local_writes == local_writes_in(run)
    assert activities_in(run) == [names.RECORD_RUN]
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)


async def test_a_run_from_before_the_revision_writes_as_it_did(harness: Harness) -> None:
    with without_patch():
        handle = await harness.start(configuration())
        assert (await harness.result(handle)).status == "done"
    run = await handle.fetch_history()
    assert local_writes_in(run) == 0 and activities_in(run) == [names.RECORD_RUN, names.RECORD_RUN]
    await harness.check_eventlogs_replay(handle)


async def test_a_write_whose_end_comes_after_the_next_steps(harness: Harness) -> None:
    """The first write takes longer than the SDK holds a workflow task for it (80% of the task's
    timeout, here 2 s): the task ends without it and the run goes on, to its end, meanwhile. The last
    write carries all of it; the first, ending late with an earlier place, changes nothing."""
    harness.backend.slow_local_writes = [3.0]
    inp = await harness.run_input(configuration())
    handle = await harness.client.start_workflow(
        RunWorkflow.run,
        inp,
        id=run_workflow_id(PROJECT, "train"),
        task_queue=harness.queue,
        task_timeout=timedelta(seconds=2),
    )
    assert (await harness.result(handle)).status == "done"
    await harness.wait_until("the slow write to end", lambda: not harness.backend.slow_local_writes)
    run = await handle.fetch_history()
    kinds = [e.event_type for e in run.events]
    # The run heard its job's end, and wrote it, while its first write was still in flight.
    assert kinds.index(EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED) < kinds.index(
        EventType.EVENT_TYPE_MARKER_RECORDED
    )
    assert activities_in(run) == [names.RECORD_RUN]
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)


async def test_writes_not_heard_to_end_go_with_continue_as_new(harness: Harness) -> None:
    """A run that continues as new after each step, its first write slower than the SDK holds a workflow
    task for it: the execution continues as new with the write in flight, which it drops, and the next
    execution writes what it carried again."""
    harness.backend.watch_script = {(0, 0, 0): exited(1), (0, 0, 1): exited(0)}
    harness.backend.slow_local_writes = [3.0]
    inp = await harness.run_input(configuration(retry=RETRY_ON_ERROR))
    handle = await harness.client.start_workflow(
        RunWorkflow.run,
        inp.model_copy(update={"continue_as_new_each_step": True}),
        id=run_workflow_id(PROJECT, "train"),
        task_queue=harness.queue,
        task_timeout=timedelta(seconds=2),
    )
    result = await harness.result(handle)
    assert result.status == RunStatus.DONE
    histories = await execution_histories(handle)
    assert len(histories) >= 4
    await check_continued_log(harness, handle, result)
    assert [harness.backend.jobs[k].status for k in [(0, 0, 0), (0, 0, 1)]] == ["failed", "done"]
