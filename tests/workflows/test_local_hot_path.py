"""The local hot path (docs/scaling.md#the-hot-path): a job's signals to its fleet and its run, the fleet's
to its jobs, sent by a local activity; jobs and fleets begun before the patch send as they did, and
replay."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from core.wire import activity_names as names
from core.wire.workflow_ids import job_workflow_id
from tests.workflows.harness import Harness, check_patch_guards, configuration, without_patch
from tests.workflows.test_short_job_history import activities_in
from workflows.signals import LOCAL_HOT_PATH

JOB = (0, 0, 0)
SIGNALS_SENT = EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED


def signals_sent(history: WorkflowHistory) -> list[str]:
    return [
        e.signal_external_workflow_execution_initiated_event_attributes.signal_name
        for e in history.events
        if e.event_type == SIGNALS_SENT
    ]


async def histories(harness: Harness, handle_id: str) -> tuple[WorkflowHistory, WorkflowHistory]:
    run = await harness.client.get_workflow_handle(handle_id).fetch_history()
    job = await harness.client.get_workflow_handle(job_workflow_id(handle_id, *JOB)).fetch_history()
    return run, job


async def test_a_jobs_and_its_fleets_signals_go_by_local_activity(harness: Harness) -> None:
    handle = await harness.start(configuration())
    assert (await harness.result(handle)).status == "done"
    run, job = await histories(harness, handle.id)
    # None by the job itself: its last word comes with its result (docs/jobs.md#the-last-word).
    assert signals_sent(job) == [] and activities_in(job) == [names.PREPARE_AND_START]
    assert activities_in(run) == [names.RECORD_RUN]  # the last write is local (revisions.LOCAL_LAST_WRITE)
    fleet = await harness.fleet().fetch_history()
    assert signals_sent(fleet) == []
    # The store heard everything all the same: the run's and the job's eventlogs replay to their statuses.
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)


async def test_histories_from_before_the_local_hot_path_replay(harness: Harness) -> None:
    with without_patch(LOCAL_HOT_PATH):
        handle = await harness.start(configuration())
        assert (await harness.result(handle)).status == "done"
    run, job = await histories(harness, handle.id)
    assert signals_sent(job) == ["enqueue", "job_update", "release", "job_update"]
    assert activities_in(run) == [names.RECORD_RUN, names.RECORD_RUN]
    await harness.check_eventlogs_replay(handle)
    await check_patch_guards(job, LOCAL_HOT_PATH)
    fleet = await harness.fleet().fetch_history()
    assert signals_sent(fleet) == ["placed"]
    await check_patch_guards(fleet, LOCAL_HOT_PATH)
