"""A run's store writes as local activities that no step waits for (workflows/run_records.py,
docs/runs.md#the-store): the store ends with the run's whole eventlog, and the histories replay, however
late a write's end is heard."""

from __future__ import annotations

from datetime import timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from core.status import RunStatus
from core.wire import activity_names as names
from core.wire.workflow_ids import run_workflow_id
from tests.workflows.doubles import exited
from tests.workflows.harness import PROJECT, WORKFLOWS, Harness, configuration, without_patch
from tests.workflows.test_run_continue_as_new import (
    RETRY_ON_ERROR,
    check_continued_log,
    execution_histories,
)
from tests.workflows.test_short_job_history import activities_in
from workflows.run import RunWorkflow

LOCAL_ACTIVITY = "core_local_activity"  # the SDK's marker


def is_local_write(event: HistoryEvent) -> bool:
    """A local activity's marker (in a run's history, a store write)."""
    if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
        return False
    return event.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY


def local_writes_in(history: WorkflowHistory) -> int:
    return sum(1 for e in history.events if is_local_write(e))


async def test_a_runs_writes_are_local(harness: Harness) -> None:
    handle = await harness.start(configuration())
    assert (await harness.result(handle)).status == "done"
    run = await handle.fetch_history()
    # The submission's events with the job's first news, then the run's end, each from its step's task.
    assert local_writes_in(run) == 2 and harness.backend.local_writes == 2
    assert activities_in(run) == []
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)


async def test_a_run_whose_last_write_ends_a_workflow_task_later_replays(harness: Harness) -> None:
    """The run's last act waits for its last write, and only its completion follows (run_records.py).
    The SDK may tell the workflow of the write's end in the workflow task after the one its marker is in,
    where a replay tells it at once: the completion moves one task earlier on replay, which it takes."""
    harness.backend.watch_script = {(0, 0, 0): exited(1)}
    handle = await harness.start(configuration())
    result = await harness.result(handle)
    assert result.status == RunStatus.FAILED  # its workflow fails, deciding a patch before the wait
    history = await handle.fetch_history()
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)
    await replayer.replay_workflow(completed_a_task_later(history))


def completed_a_task_later(history: WorkflowHistory) -> WorkflowHistory:
    """`history` with a workflow task of its own, and no news, between its last write's marker and what
    followed it (the run's end, as a replay may send it)."""
    events = list(history.events)
    last = max(i for i, e in enumerate(events) if is_local_write(e))
    task = [e for e in events[:last] if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED][-1]
    at = events.index(task)
    inserted = [HistoryEvent() for _ in range(3)]
    for n, (event, model) in enumerate(zip(inserted, events[at : at + 3], strict=True)):
        event.CopyFrom(model)
        event.event_id = events[last].event_id + 1 + n
    scheduled, started, completed = inserted
    started.workflow_task_started_event_attributes.scheduled_event_id = scheduled.event_id
    completion = completed.workflow_task_completed_event_attributes
    completion.scheduled_event_id, completion.started_event_id = scheduled.event_id, started.event_id
    moved = []
    for original in events[last + 1 :]:
        event = HistoryEvent()
        event.CopyFrom(original)
        event.event_id += 3
        attributes = getattr(event, event.WhichOneof("attributes") or "")
        attributes.workflow_task_completed_event_id = completed.event_id  # all commands of that task
        moved.append(event)
    return WorkflowHistory(history.workflow_id, events[: last + 1] + inserted + moved)


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
    write carries all of it; the first, ending late with an earlier place, changes nothing. Its marker
    comes after the job's end."""
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
    assert activities_in(run) == []
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
