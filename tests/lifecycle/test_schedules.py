"""Scheduled runs against the real dev server (docs/schedules.md): the run's Temporal Schedule is created
with it and deleted with it; a trigger runs a cycle and the run waits PENDING again, each cycle's log kept;
pause and resume reach the schedule; a schedule that fires every minute starts a cycle on its own."""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path

import pytest
from temporalio.client import ScheduleActionStartWorkflow, ScheduleHandle
from temporalio.service import RPCError, RPCStatusCode

from cli.api import FerryAPI
from core.configuration import TaskConfiguration, parse_configuration
from core.runs.cycles import next_triggers
from core.runs.status_words import format_utc
from core.status import RunStatus
from core.wire.workflow_ids import schedule_id
from store import RunRecord
from tests.lifecycle.checks import eventually

SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}


async def scheduled(ferry: FerryAPI, tmp_path: Path, cron: str) -> tuple[RunRecord, ScheduleHandle]:
    conf = parse_configuration(
        {
            "type": "task",
            "commands": ['echo "cycle at $(date +%s)"'],
            "resources": SMALL,
            "schedule": {"cron": cron},
        }
    )
    assert isinstance(conf, TaskConfiguration)
    record = await ferry.submit(conf, repo_dir=tmp_path)
    await eventually("the run waiting for its schedule", lambda: _waiting(ferry, record.run_name))
    return record, ferry.client.get_schedule_handle(schedule_id(record.workflow_id, record.id))


async def _waiting(ferry: FerryAPI, run_name: str, last: str | None = None) -> bool:
    run = await ferry.get_run(run_name)
    message = run.status_message or ""
    done = last is None or f"(last cycle {last})" in message
    return run.status == RunStatus.PENDING and message.startswith("next at ") and done


async def _submissions(ferry: FerryAPI, record: RunRecord) -> list[str]:
    jobs = await asyncio.to_thread(ferry.store.list_job_submissions, record.id)
    return [j.status for j in sorted(jobs, key=lambda j: j.submission_num)]


async def test_trigger_pause_resume_and_stop(ferry: FerryAPI, tmp_path: Path) -> None:
    record, schedule = await scheduled(ferry, tmp_path, "0 0 1 1 *")  # once a year: only triggers run
    described = await schedule.describe()
    assert described.schedule.spec.calendars  # the server keeps the cron as calendars
    action = described.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow) and action.workflow == "CycleWorkflow"
    assert await _submissions(ferry, record) == []  # nothing ran before the schedule fired

    for cycle in (1, 2):
        # A trigger while a cycle's workflow still runs is skipped (the overlap policy): under load the
        # workflow may still be closing once the store says its job is done.
        await eventually("no cycle running", functools.partial(_none_running, schedule))
        await schedule.trigger()
        await eventually(f"cycle {cycle}'s job", functools.partial(_count, ferry, record, cycle))
        await eventually(f"cycle {cycle} done", lambda: _all_done(ferry, record), limit=60)
    assert await _submissions(ferry, record) == ["done", "done"]  # each cycle's job is kept
    log = (await asyncio.to_thread(ferry.logs, record))[0]
    assert log.startswith(b"cycle at ")

    await schedule.pause(note="test")
    assert (await schedule.describe()).schedule.state.paused
    await schedule.unpause()
    assert not (await schedule.describe()).schedule.state.paused

    await ferry.stop(record.run_name)
    final = await ferry.wait(record.run_name)
    assert final.status == RunStatus.TERMINATED
    with pytest.raises(RPCError) as gone:
        await schedule.describe()
    assert gone.value.status == RPCStatusCode.NOT_FOUND
    events = [e.name for e in ferry.run_events(final)]
    assert events.count("cycle") == 2 and events.count("cycle-end") == 2


async def _all_done(ferry: FerryAPI, record: RunRecord) -> bool:
    finished = all(status == "done" for status in await _submissions(ferry, record))
    return finished and await _waiting(ferry, record.run_name, "done")


async def _none_running(schedule: ScheduleHandle) -> bool:
    return not (await schedule.describe()).info.running_actions


async def _count(ferry: FerryAPI, record: RunRecord, count: int) -> bool:
    return len(await _submissions(ferry, record)) == count


async def test_a_schedule_fires_on_its_own(ferry: FerryAPI, tmp_path: Path) -> None:
    record, _ = await scheduled(ferry, tmp_path, "* * * * *")
    await eventually("a cycle started by the schedule", lambda: _count(ferry, record, 1), limit=75)
    await eventually("back to waiting", lambda: _waiting(ferry, record.run_name, "done"), limit=30)
    await ferry.stop(record.run_name)
    assert (await ferry.wait(record.run_name)).status == RunStatus.TERMINATED


async def test_a_new_cron_updates_the_schedule_in_place(ferry: FerryAPI, tmp_path: Path) -> None:
    """docs/schedules.md#changing-a-scheduled-run: the same run and the same Temporal Schedule, paused
    still, with the new cron; the run waits for the new next trigger."""
    record, schedule = await scheduled(ferry, tmp_path, "0 0 1 1 *")
    await schedule.pause(note="test")
    before = (await schedule.describe()).schedule.spec.calendars
    conf = parse_configuration({**record.configuration_data(), "schedule": {"cron": "0 0 1 7 *"}})
    assert isinstance(conf, TaskConfiguration)
    reply = await ferry.deploy(record.run_name, conf)
    assert (reply.changed, reply.refused, reply.after_cycle) == (["schedule"], None, None)
    next_at = format_utc(next_triggers(["0 0 1 7 *"], time.time())[0])

    async def rescheduled() -> bool:
        # The store's status and the schedule's update are written side by side (one step's effects).
        run = await ferry.get_run(record.run_name)
        spec = (await schedule.describe()).schedule.spec
        return (run.status_message or "").startswith(f"next at {next_at}") and spec.calendars != before

    await eventually("the run and its schedule on the new cron", rescheduled)
    described = (await schedule.describe()).schedule
    assert described.state.paused
    assert [c.month[0].start for c in described.spec.calendars] == [7]
    run = await ferry.get_run(record.run_name)
    assert run.id == record.id and run.configuration_data()["schedule"] == {"cron": ["0 0 1 7 *"]}
    await ferry.stop(record.run_name)
    assert (await ferry.wait(record.run_name)).status == RunStatus.TERMINATED
