"""A job's shorter history (docs/jobs.md#a-shorter-history): a job with nothing to wait for between its
task's preparation and its start takes one activity for both, and removes its task with a local activity;
histories begun before take the long way, and replay."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from core.wire import activity_names as names
from core.wire.workflow_ids import job_workflow_id
from tests.workflows.harness import Harness, check_patch_guards, configuration, named, without_patch
from workflows import job as job_workflow

JOB = (0, 0, 0)


def activities_in(history: WorkflowHistory) -> list[str]:
    scheduled = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == scheduled
    ]


async def test_a_plain_job_is_prepared_and_started_in_one_activity(harness: Harness) -> None:
    handle = await harness.start(configuration())
    assert (await harness.result(handle)).status == "done"
    [both] = harness.backend.called(names.PREPARE_AND_START, JOB)
    [prepare], [start] = harness.backend.called(names.PREPARE_TASK), harness.backend.called(names.START_JOB)
    assert (both.prepare, both.start) == (prepare, start)
    events = harness.job_events(JOB)
    assert [e.name for e in events if e.name in ("alloc", "pull", "start")] == ["alloc", "pull", "start"]
    assert named(events, "release", final=True) != [] and harness.backend.called(names.RELEASE_TASK) != []
    history = await harness.client.get_workflow_handle(job_workflow_id(handle.id, *JOB)).fetch_history()
    assert activities_in(history) == [names.PREPARE_AND_START]  # the removal: a local activity's marker
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)


async def test_a_job_that_waits_for_its_master_takes_two_steps(harness: Harness) -> None:
    conf = configuration(nodes=2, startup_order="master-first")
    handle = await harness.start(conf)
    assert (await harness.result(handle)).status == "done"
    assert harness.backend.called(names.PREPARE_AND_START, (0, 1, 0)) == []
    assert len(harness.backend.called(names.START_JOB, (0, 1, 0))) == 1
    assert named(harness.job_events((0, 1, 0)), "memo", waiting="master") != []


async def test_job_histories_from_before_the_shorter_history_replay(harness: Harness) -> None:
    with without_patch(job_workflow._SHORT_HISTORY):
        handle = await harness.start(configuration())
        assert (await harness.result(handle)).status == "done"
    assert harness.backend.called(names.PREPARE_AND_START) == []
    history = await harness.client.get_workflow_handle(job_workflow_id(handle.id, *JOB)).fetch_history()
    assert activities_in(history) == [names.PREPARE_TASK, names.START_JOB, names.RELEASE_TASK]
    await check_patch_guards(history, job_workflow._SHORT_HISTORY)
