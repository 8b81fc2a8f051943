"""A run's last store write is a local activity, its last act (revisions.LOCAL_LAST_WRITE,
docs/runs.md#the-store): the store ends with the run's whole eventlog, and the histories replay, however
late the write's end is heard."""

from __future__ import annotations

from datetime import timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from core.status import RunStatus
from core.wire import activity_names as names
from core.wire import revisions
from core.wire.workflow_ids import run_workflow_id
from tests.workflows.doubles import exited
from tests.workflows.harness import PROJECT, WORKFLOWS, Harness, configuration
from tests.workflows.test_last_words import start
from tests.workflows.test_short_job_history import activities_in
from workflows.run import RunWorkflow

LOCAL_ACTIVITY = "core_local_activity"  # the SDK's marker


def is_local_write(event: HistoryEvent) -> bool:
    """A local activity's marker (in a run's history, its last store write)."""
    if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
        return False
    return event.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY


def local_writes_in(history: WorkflowHistory) -> int:
    return sum(1 for e in history.events if is_local_write(e))


async def test_a_runs_last_write_is_local_and_its_last_act(harness: Harness) -> None:
    handle = await start(harness, configuration())
    assert (await harness.result(handle)).status == RunStatus.DONE
    run = await handle.fetch_history()
    # The submission's events go with the job's first news (a regular write), the run's end locally.
    assert local_writes_in(run) == 1 and harness.backend.local_writes == 1
    assert activities_in(run) == [names.RECORD_RUN]
    last, end = (e.event_type for e in run.events[-2:])
    assert last == EventType.EVENT_TYPE_MARKER_RECORDED
    assert end == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
    assert harness.backend.runs["train-0001"].status == RunStatus.DONE.value
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)


async def test_a_run_whose_last_write_ends_a_workflow_task_later_replays(harness: Harness) -> None:
    """The SDK may tell the workflow of the write's end in the workflow task after the one its marker is
    in, where a replay tells it at once: the completion moves one task earlier on replay, which it takes.
    A FAILED run's ending asks a patch: asked after the write, this replay would fail."""
    harness.backend.watch_script = {(0, 0, 0): exited(1)}
    handle = await start(harness, configuration())
    result = await harness.result(handle)
    assert result.status == RunStatus.FAILED  # its workflow fails
    history = await handle.fetch_history()
    assert local_writes_in(history) == 1
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)
    await replayer.replay_workflow(completed_a_task_later(history))
    await harness.check_eventlogs_replay(handle)


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
    handle = await start(harness, configuration(), revision=revisions.LAST_WORDS)
    assert (await harness.result(handle)).status == RunStatus.DONE
    run = await handle.fetch_history()
    assert local_writes_in(run) == 0 and activities_in(run) == [names.RECORD_RUN, names.RECORD_RUN]
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)


async def test_a_last_write_longer_than_its_workflow_task(harness: Harness) -> None:
    """The last write takes longer than the SDK holds a workflow task for it (80% of the task's timeout,
    here 2 s): the task ends without its marker, and the run completes in the next, once it ended."""
    harness.backend.slow_local_writes = [3.0]
    inp = await harness.run_input(configuration())
    handle = await harness.client.start_workflow(
        RunWorkflow.run,
        inp,
        id=run_workflow_id(PROJECT, inp.run_name),
        task_queue=harness.queue,
        task_timeout=timedelta(seconds=2),
    )
    assert (await harness.result(handle)).status == RunStatus.DONE
    assert not harness.backend.slow_local_writes and harness.backend.local_writes == 1
    run = await handle.fetch_history()
    assert local_writes_in(run) == 1
    assert harness.backend.runs["train-0001"].status == RunStatus.DONE.value
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)
