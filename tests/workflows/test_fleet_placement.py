"""Runs on an SSH fleet of doubles (FleetWorkflow with the fleet activities replaced): the placement of a
multi-node task, and a lost host whose job fails with INSTANCE_UNREACHABLE and runs again elsewhere."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from core.configuration import FleetConfiguration, parse_configuration
from core.fleets import book
from core.fleets.book import FleetInput
from core.fleets.messages import FLEET_ENQUEUE, InstanceChange
from core.fleets.placement import InstanceStatus
from core.settings import fleet_task_queue
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from core.wire import activity_names as names
from core.wire.agent_api import Resources
from core.wire.job_messages import Enqueue, NodeRequest, PlacementRequest
from core.wire.workflow_ids import fleet_workflow_id, job_workflow_id
from tests.workflows.doubles import BLOCK, host_slot
from tests.workflows.harness import (
    POLL,
    PROJECT,
    WAIT_LIMIT,
    Harness,
    check_patch_guards,
    configuration,
    named,
    without_patch,
)
from workflows import fleet as fleet_workflow
from workflows import fleet_records
from workflows.fleet import FleetWorkflow
from workflows.signals import LOCAL_HOT_PATH

FLEET = "lab"
RUNNING = WorkflowExecutionStatus.RUNNING


def lab(hosts: int = 3) -> FleetConfiguration:
    conf = parse_configuration(
        {
            "type": "fleet",
            "name": FLEET,
            "ssh_config": {"user": "root", "hosts": [f"host{n}.example" for n in range(hosts)]},
        }
    )
    assert isinstance(conf, FleetConfiguration)
    return conf


async def check_logs(harness: Harness, handle: Any) -> None:
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)


async def test_a_two_node_task_gets_two_hosts_and_its_masters_address(harness: Harness) -> None:
    await harness.start_fleet(FLEET, lab())
    handle = await harness.start(configuration(nodes=2), fleet=FLEET)
    result = await harness.result(handle)
    assert result.status == RunStatus.DONE
    starts = {s.spec.job_num: s for s in harness.backend.called(names.START_JOB)}
    assert starts[0].instance_name != starts[1].instance_name
    clusters = [starts[n].spec.cluster_info for n in (0, 1)]
    master = clusters[0].node_ips[0]
    assert [c.master_node_ip for c in clusters] == [master, master] and [c.node_rank for c in clusters] == [
        0,
        1,
    ]
    index = int(starts[0].instance_name.rsplit("-", 1)[1])
    assert master == f"10.0.0.{index + 1}"  # node 0's host, as the doubles number them
    described = await harness.describe_fleet(FLEET)
    assert described.idle and [i.name for i in described.instances] == ["lab-0", "lab-1", "lab-2"]
    await check_logs(harness, handle)


async def test_a_lost_host_fails_its_job_which_is_retried_on_another(harness: Harness) -> None:
    """A service of two replicas: replica 0's host is lost; its job fails with INSTANCE_UNREACHABLE and,
    the other replica being active, is resubmitted at once (docs/runs.md STEP 2) on the third host."""
    backend = harness.backend
    backend.watch_script = {(0, 0, 0): BLOCK, (1, 0, 0): BLOCK, (0, 0, 1): BLOCK}
    await harness.start_fleet(FLEET, lab())
    conf = configuration("service", replicas=2, retry={"on_events": ["interruption"], "duration": "1h"})
    handle = await harness.start(conf, fleet=FLEET)
    await harness.wait_until("both replicas to run", lambda: len(backend.called(names.WATCH_JOB)) == 2)
    [first] = backend.called(names.START_JOB, (0, 0, 0))
    [other] = backend.called(names.START_JOB, (1, 0, 0))
    backend.report_health(
        InstanceChange(name=first.instance_name, status=InstanceStatus.UNREACHABLE, note="silent")
    )
    await harness.wait_until(
        "the new submission to run", lambda: bool(backend.called(names.WATCH_JOB, (0, 0, 1)))
    )
    # The run stores the lost job's end and starts the new submission in the same step, in either order.
    lost = backend.jobs[(0, 0, 0)]
    ended = lambda: JobStatus(lost.status or JobStatus.SUBMITTED).is_finished()  # noqa: E731
    await harness.wait_until("the lost job's end stored", ended)
    assert (lost.status, lost.reason) == (JobStatus.FAILED, JobTerminationReason.INSTANCE_UNREACHABLE)
    events = harness.job_events((0, 0, 0))
    [exception] = named(events, "exception", severity=0)
    assert exception.context["type"] == "lost" and "silent" in exception.context["note"]
    assert named(events, "release") == [] and named(events, "free") != []
    # Nothing was asked of the lost host: no stop, no removal of the task.
    assert backend.called(names.STOP_TASK) == [] and backend.called(names.RELEASE_TASK, (0, 0, 0)) == []
    [second] = backend.called(names.START_JOB, (0, 0, 1))
    assert second.instance_name not in (first.instance_name, other.instance_name)

    # The host comes back: its lost job's task is removed before it takes jobs again.
    slot = host_slot(first.instance_name, int(first.instance_name.rsplit("-", 1)[1]), FLEET)
    backend.report_health(InstanceChange(name=first.instance_name, status=InstanceStatus.READY, slot=slot))
    await harness.wait_until("the host to be cleaned", lambda: bool(backend.cleaned))
    assert [(c.instance, c.job_ids) for c in backend.cleaned] == [
        (first.instance_name, [first.job_submission_id])
    ]
    await harness.stop(handle)
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.STOPPED_BY_USER,
    )
    described = await harness.describe_fleet(FLEET)
    assert described.idle and {i.status for i in described.instances} == {InstanceStatus.READY}
    await check_logs(harness, handle)


async def test_a_host_that_fails_to_deploy_is_left_out_and_a_task_too_big_is_refused(
    harness: Harness,
) -> None:
    harness.backend.hosts = {1: "cannot connect"}
    await harness.start_fleet(FLEET, lab(hosts=2))
    handle = await harness.start(configuration(nodes=2), fleet=FLEET)
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    # Both jobs are refused in one step of the fleet's; the run, hearing the first, stops the other, which
    # under load may hear that before its own refusal (seen once in CI).
    reasons = [log.reason for log in harness.backend.jobs.values()]
    assert "failed_to_start_due_to_no_capacity" in reasons, reasons
    assert set(reasons) <= {"failed_to_start_due_to_no_capacity", "terminated_by_server"}, reasons
    described = await harness.describe_fleet(FLEET)
    assert described.pending == {"lab-1": "cannot connect"} and described.idle
    await check_logs(harness, handle)


# --- a queue served without waiting for the signals' delivery ---------------------------------------------


def never_two_on_one_host(harness: Harness) -> None:
    """In the order the agent doubles were called: a task prepared on a host whose task is not removed
    yet would be capacity granted twice (the lab's hosts have one block)."""
    holding: dict[str, str] = {}  # host -> the job submission whose task it holds
    for name, _key, arg in harness.backend.calls:
        if name == names.PREPARE_TASK:
            assert arg.instance_name not in holding, f"{arg.job_submission_id} joined {holding}"
            holding[arg.instance_name] = arg.job_submission_id
        elif name == names.RELEASE_TASK:
            holding = {host: job for host, job in holding.items() if job != arg.job_submission_id}


async def queued_burst(harness: Harness, runs: int) -> list[Any]:
    """`runs` one-node tasks at once on the two hosts of the lab; every one ends DONE."""
    await harness.start_fleet(FLEET, lab(hosts=2))
    handles = [await harness.start(configuration(), name=f"q{n}", fleet=FLEET) for n in range(runs)]
    # Polled in real time: several results awaited at once on the time-skipping server skip its time
    # while signals are on their way, and the runs time out.
    deadline = time.monotonic() + WAIT_LIMIT
    while RUNNING in (statuses := [(await h.describe()).status for h in handles]):
        assert time.monotonic() < deadline, f"waited {WAIT_LIMIT:.0f}s for the runs: {statuses}"
        await asyncio.sleep(POLL)
    results = [await harness.result(h) for h in handles]
    assert [r.status for r in results] == [RunStatus.DONE] * runs
    never_two_on_one_host(harness)
    described = await harness.describe_fleet(FLEET)
    assert described.idle and described.queue == []
    return handles


async def test_a_queued_burst_runs_every_job_and_never_two_on_one_host(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The jobs that wait are in the queue the fleet records (here at every step: the burst is over in
    less than RECORD_EVERY), not told one by one; the last record of the queue, once all ran, is empty."""
    monkeypatch.setattr(fleet_records, "RECORD_EVERY", timedelta(0))
    handles = await queued_burst(harness, 6)
    heard = await signals_heard(harness, handles)
    assert heard.count("placed") == 6 and heard.count("queued") == 0
    recorded = harness.backend.queues_recorded
    assert any(recorded) and None not in recorded  # some waited
    deadline = time.monotonic() + WAIT_LIMIT  # the last record may still be on its way
    while harness.backend.fleet_records[FLEET].waiting != []:
        assert time.monotonic() < deadline, f"the queue recorded last: {recorded[-1]}"
        await asyncio.sleep(POLL)
    for handle in handles:  # each run's, its job's and the fleet's
        await harness.check_histories_replay(handle)


async def test_fleet_histories_from_before_the_queue_in_the_store_replay(harness: Harness) -> None:
    """A fleet that told each waiting job (before `fleet-queue-recorded`) replays on today's workflow,
    which goes on telling them; its records carry no queue."""
    with without_patch(fleet_workflow._QUEUE_RECORDED):
        handles = await queued_burst(harness, 4)
        history = await harness.fleet(FLEET).fetch_history()
    assert (await signals_heard(harness, handles)).count("queued") >= 1
    assert harness.backend.queues_recorded and set(harness.backend.queues_recorded) == {None}
    # Unguarded, a step would send fewer signals than its local activity's recorded result answers: the
    # replay fails in the workflow's code (a RuntimeError from the replayer), not in the SDK's matching.
    await check_patch_guards(
        history, fleet_workflow._QUEUE_RECORDED, (workflow.NondeterminismError, RuntimeError)
    )


async def test_a_step_applies_at_most_step_commands_and_the_rest_waits_for_the_next(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One command a step (STEP_COMMANDS is 256): every run still runs, none twice on a host, and the
    histories replay."""
    monkeypatch.setattr(book, "STEP_COMMANDS", 1)
    handles = await queued_burst(harness, 6)
    assert (await signals_heard(harness, handles)).count("placed") == 6
    for handle in handles:
        await harness.check_histories_replay(handle)


async def signals_heard(harness: Harness, handles: list[WorkflowHandle[Any, Any]]) -> list[str]:
    """The names of the signals the runs' jobs heard (from their fleet: workflows/signals.py)."""
    heard = []
    for handle in handles:
        job = harness.client.get_workflow_handle(job_workflow_id(handle.id, 0, 0, 0))
        history = await job.fetch_history()
        heard += [
            e.workflow_execution_signaled_event_attributes.signal_name
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        ]
    return heard


async def test_a_grant_whose_job_never_hears_of_it_comes_back(harness: Harness) -> None:
    """A placement signalled to a job that has ended (here: never was) fails after the fleet has gone on;
    it comes back through the inbox and the host goes to the next job."""
    await harness.start_fleet(FLEET, lab(hosts=1))
    ghost = PlacementRequest(
        request_id="ghost", nodes=[NodeRequest(job_id="ghost-j0", resources=Resources())]
    )
    await harness.fleet(FLEET).signal(
        FLEET_ENQUEUE, Enqueue(request=ghost, notify={"ghost-j0": "ferry/test/no-such-job"})
    )
    handle = await harness.start(configuration(), fleet=FLEET)
    assert (await harness.result(handle)).status == RunStatus.DONE
    described = await harness.describe_fleet(FLEET)
    assert described.idle and described.queue == []
    await check_logs(harness, handle)


async def test_fleet_histories_from_before_the_unblocked_sends_replay(harness: Harness) -> None:
    """A fleet whose steps waited for their signals (a release before `fleet-send-unblocked`, which
    recorded no marker) replays on today's workflow, which keeps waiting there."""
    with without_patch(LOCAL_HOT_PATH, fleet_workflow._SEND_UNBLOCKED):
        await queued_burst(harness, 4)
        history = await harness.fleet(FLEET).fetch_history()
    marker = EventType.EVENT_TYPE_MARKER_RECORDED
    assert all(fleet_workflow._SEND_UNBLOCKED not in str(e) for e in history.events if e.event_type == marker)
    await check_patch_guards(history, fleet_workflow._SEND_UNBLOCKED)


async def fleet_histories(harness: Harness, first_run_id: str) -> list[tuple[str, Any]]:
    """The fleet's executions from its first on, each continued as new from the one before: (the task
    queue it ran on, its history)."""
    found: list[tuple[str, Any]] = []
    run_id: str | None = first_run_id
    while run_id is not None:
        history = await harness.client.get_workflow_handle(
            harness.fleet(FLEET).id, run_id=run_id
        ).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        found.append((started.task_queue.name, history))
        last = history.events[-1]
        continued = last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if continued
            else None
        )
    return found


# The time-skipping server fails the workflow task that cancels the watches before continuing as new
# (tests/workflows/conftest.py); the real server takes it.
@pytest.mark.dev_server
async def test_a_fleet_continues_as_new_after_history_events_onto_the_fleets_queue(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet begun on the runs' queue (before the fleets had their own) continues as new once its history
    holds HISTORY_EVENTS events, onto the fleets' queue; every run still runs, none twice on a host, and
    the book goes over whole (the fleet ends idle, its queue empty)."""
    monkeypatch.setattr(book, "HISTORY_EVENTS", 60)
    first = await harness.client.start_workflow(
        FleetWorkflow.run,
        FleetInput(project=PROJECT, name=FLEET, configuration=lab(hosts=2)),
        id=fleet_workflow_id(PROJECT, FLEET),
        task_queue=harness.queue,
    )
    handles = await queued_burst(harness, 6)
    assert first.result_run_id is not None
    deadline = time.monotonic() + WAIT_LIMIT  # its last step may still be going on
    while len(executions := await fleet_histories(harness, first.result_run_id)) < 2:
        assert time.monotonic() < deadline, "the fleet never continued as new"
        await asyncio.sleep(POLL)
    assert executions[0][0] == harness.queue
    assert {queue for queue, _ in executions[1:]} == {fleet_task_queue(harness.queue)}
    # Continued soon after the bound: within a step or two of it.
    assert all(len(history.events) < 120 for _, history in executions[:-1])
    for handle in handles:
        await harness.check_histories_replay(handle)


async def test_fleet_histories_from_before_the_bounded_history_replay(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet that continued as new only when the server suggested it (before `fleet-bounded-history`)
    replays on today's workflow, which does not continue it sooner."""
    monkeypatch.setattr(book, "HISTORY_EVENTS", 30)
    with without_patch(fleet_workflow._BOUNDED_HISTORY):
        await queued_burst(harness, 4)
        history = await harness.fleet(FLEET).fetch_history()
    assert history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id == ""
    assert len(history.events) > 60  # it would have continued after 30, long before its end
    # Continuing sooner first cancels the watches: a replay that diverges on an activity's cancel fails as
    # a fatal error of the SDK's state machines (a RuntimeError), not always as a NondeterminismError.
    await check_patch_guards(
        history, fleet_workflow._BOUNDED_HISTORY, (workflow.NondeterminismError, RuntimeError)
    )
