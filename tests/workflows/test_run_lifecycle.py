"""RunWorkflow and JobWorkflow on the time-skipping test server, with scripted activity doubles.

Each test names the lifecycle step it covers (docs/runs.md for runs, docs/jobs.md for jobs). Every
test ends by checking that the eventlogs the doubles stored are the workflows' own and replay to their state
(docs/eventlog.md), and that the recorded histories replay without nondeterminism (docs/README.md).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.client import WithStartWorkflowOperation, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from core.fleets.messages import InstanceChange
from core.runs import retry
from core.runs.lifecycle import submit_run
from core.runs.workflow_messages import RunCarry, RunInput
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from core.wire import activity_names as names
from core.wire.messages import StopTask
from core.wire.run_messages import StopRequest
from core.wire.workflow_ids import LOCAL_FLEET, run_workflow_id
from tests.workflows.doubles import BLOCK, LOCAL_CPUS, TRAP, exited
from tests.workflows.harness import (
    PROJECT,
    SMALL,
    WORKFLOWS,
    Harness,
    check_patch_guards,
    configuration,
    named,
    without_patch,
)
from tests.workflows.test_run_continue_as_new import check_continued_log, execution_histories
from workflows import fleet as fleet_workflow
from workflows.fleet import FleetWorkflow
from workflows.run import RETRY_WINDOW, RunWorkflow, _carried_machine
from workflows.search_attributes import SA_STATUS

RETRY_ON_ERROR = {"on_events": ["error"], "duration": "1h"}


async def check_logs(harness: Harness, handle: WorkflowHandle[Any, Any]) -> None:
    await harness.check_eventlogs_replay(handle)
    await harness.check_histories_replay(handle)


async def test_task_done(harness: Harness) -> None:
    """docs/runs.md STEP 1-2 and 5, job STEP 1-5: one job exits 0, the run ends DONE."""
    handle = await harness.start(configuration())
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.DONE, RunTerminationReason.ALL_JOBS_DONE)
    statuses = [e.context["status"] for e in named(harness.run_events(), "status")]
    # Provisioning that is over within moments is news the job sends with its start (JobWorkflow._publish).
    assert statuses == ["running", "terminating"]
    assert [e.name for e in harness.job_events((0, 0, 0))] == [
        "submit",
        "alloc",
        "pull",
        "start",
        "finish",
        "release",
        "free",
        "clean",
    ]
    assert harness.backend.called(names.RELEASE_TASK) != []
    described = await handle.describe()
    assert described.typed_search_attributes.get(SA_STATUS) == "done"
    await check_logs(harness, handle)


async def test_slow_provisioning_is_reported(harness: Harness) -> None:
    """docs/runs.md STEP 1: a job that takes a while to provision makes its run PROVISIONING (the news of
    a slow step goes without waiting for the next)."""
    harness.backend.prepare_script[(0, 0, 0)] = 2.0
    handle = await harness.start(configuration())
    result = await harness.result(handle)
    assert result.status == RunStatus.DONE
    statuses = [e.context["status"] for e in named(harness.run_events(), "status")]
    assert statuses == ["provisioning", "running", "terminating"]
    await check_logs(harness, handle)


async def test_replica_retried_in_place(harness: Harness) -> None:
    """docs/runs.md STEP 2: a replica fails retryably while another is active; only it gets a new
    submission, at once, and the run stays RUNNING."""
    backend = harness.backend
    backend.watch_script = {(0, 0, 0): BLOCK, (1, 0, 0): exited(1), (1, 0, 1): BLOCK}
    handle = await harness.start(configuration("service", replicas=2, retry=RETRY_ON_ERROR))
    state = await harness.wait_for(
        handle,
        "replica 1's second submission to run",
        lambda s: (j := s.job(1, 0)) is not None and j.submission_num == 1 and j.status == JobStatus.RUNNING,
    )
    assert state.status == RunStatus.RUNNING
    replica0 = state.job(0, 0)
    assert replica0 is not None and (replica0.submission_num, replica0.status) == (0, JobStatus.RUNNING)
    events = harness.run_events()
    [retry] = named(events, "retry")
    assert retry.context == {"replicas": [1], "attempt": 0, "backoff": 0}
    assert named(events, "job-submit", replica=0, submission=1) == []
    assert "pending" not in [e.context["status"] for e in named(events, "status")]
    assert backend.called(names.STOP_TASK, (0, 0, 0)) == []
    await harness.wait_until(
        "the failed submission to finish", lambda: backend.jobs[(1, 0, 0)].status == JobStatus.FAILED
    )

    await harness.stop(handle)
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.STOPPED_BY_USER,
    )
    await check_logs(harness, handle)


async def test_pending_then_resubmitted_after_backoff(harness: Harness) -> None:
    """docs/runs.md STEP 2-3: the only job fails retryably, the run goes PENDING, waits out the 15 s
    backoff on a durable timer (skipped time), resubmits, and the new submission ends DONE."""
    harness.backend.watch_script = {(0, 0, 0): exited(1), (0, 0, 1): exited(0)}
    handle = await harness.start(configuration(retry=RETRY_ON_ERROR))
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.DONE, RunTerminationReason.ALL_JOBS_DONE)

    events = harness.run_events()
    statuses = [e.context["status"] for e in named(events, "status")]
    assert statuses == ["running", "pending", "submitted", "running", "terminating"]
    [pending] = named(events, "status", status="pending")
    [retry] = named(events, "retry")
    assert retry.context == {"replicas": [0], "attempt": 0, "backoff": 15}
    assert retry.timestamp - pending.timestamp >= 15
    [resubmit] = named(events, "job-submit", submission=1)
    assert resubmit.timestamp >= pending.timestamp + 15
    assert [harness.backend.jobs[k].status for k in [(0, 0, 0), (0, 0, 1)]] == ["failed", "done"]
    await check_logs(harness, handle)


async def test_retry_window_exceeded(harness: Harness) -> None:
    """docs/runs.md 'when can the job be retried': no-capacity failures (a job no instance of the fleet
    could ever hold) are retried only within `retry.duration` of the first submission; the failure past
    it ends the run RETRY_LIMIT_EXCEEDED."""
    too_big = {**SMALL, "cpu": f"{LOCAL_CPUS + 1}.."}
    conf = configuration(retry={"on_events": ["no-capacity"], "duration": "30s"}, resources=too_big)
    # The time-skipping server skips no time while an activity runs, and the local fleet's watch of its
    # instance (docs/fleets.md#what-an-instance-is) runs for as long as the fleet: this test's 45 s of
    # backoff are skipped on a fleet begun before that watch.
    with without_patch(fleet_workflow._DESCRIBED):
        handle = await harness.start(conf)
        result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (
        RunStatus.FAILED,
        RunTerminationReason.RETRY_LIMIT_EXCEEDED,
    )
    events = harness.run_events()
    # Failures at 0 s and 15 s are within the 30 s window; the one at 15 + 30 = 45 s is not.
    assert [e.context["backoff"] for e in named(events, "retry")] == [15, 30]
    finishes = named(events, "job-finish")
    assert [e.context["submission"] for e in finishes] == [0, 1, 2]
    assert {e.context["reason"] for e in finishes} == {"failed_to_start_due_to_no_capacity"}
    [refused] = named(harness.job_events((0, 0, 0)), "exception")
    assert "local: needs 65 CPUs, instance has 64" in refused.context["note"]
    assert finishes[-1].timestamp - finishes[0].timestamp >= 45
    assert harness.backend.called(names.PREPARE_TASK) == []
    assert harness.backend.called(names.RELEASE_TASK) == []  # nothing was ever allocated
    await check_logs(harness, handle)


async def test_a_job_failing_at_once_is_retried_only_within_the_window(harness: Harness) -> None:
    """docs/runs.md 'when a job may be retried': a task whose command fails as soon as it starts, with
    `retry: {on_events: [error]}`, is retried while within `retry.duration` of its first failure, and the
    failure past it ends the run RETRY_LIMIT_EXCEEDED: its retries' failures do not restart the window
    (they would, with dstack's clock, and retry it for ever)."""
    harness.backend.watch_script = {(0, 0, n): exited(1) for n in range(8)}
    conf = configuration(retry={"on_events": ["error"], "duration": "30s"})
    with without_patch(fleet_workflow._DESCRIBED):  # so that the backoffs are skipped (see above)
        handle = await harness.start(conf)
        result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (
        RunStatus.FAILED,
        RunTerminationReason.RETRY_LIMIT_EXCEEDED,
    )
    events = harness.run_events()
    # Failures at 0 s and about 15 s after the first are within its 30 s window; the one 45 s after is not.
    assert [e.context["backoff"] for e in named(events, "retry")] == [15, 30]
    finishes = named(events, "job-finish")
    assert [e.context["submission"] for e in finishes] == [0, 1, 2]
    assert {e.context["reason"] for e in finishes} == {"container_exited_with_error"}
    assert [len(harness.backend.called(names.START_JOB, (0, 0, n))) for n in range(3)] == [1, 1, 1]
    assert finishes[-1].timestamp - finishes[0].timestamp > 30
    await check_logs(harness, handle)


async def test_a_run_begun_before_the_retry_window_patch_keeps_the_old_count(harness: Harness) -> None:
    """docs/runs.md 'when a job may be retried', docs/upgrades.md: the task above, in a run begun before
    the patch `retry-window`, keeps the window that release counted, restarted at each failure after the
    job held an instance: it is retried past 30 s after its first failure, as long as it fails (four
    times here; its fifth submission exits 0). Its history replays today, and would not unguarded."""
    harness.backend.watch_script = {(0, 0, n): exited(1) for n in range(4)}
    conf = configuration(retry={"on_events": ["error"], "duration": "30s"})
    with without_patch(fleet_workflow._DESCRIBED, RETRY_WINDOW):
        handle = await harness.start(conf)
        result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.DONE, RunTerminationReason.ALL_JOBS_DONE)
    events = harness.run_events()
    assert [e.context["backoff"] for e in named(events, "retry")] == [15, 30, 60, 120]
    finishes = named(events, "job-finish")
    assert [e.context["submission"] for e in finishes] == [0, 1, 2, 3, 4]
    assert [e.context["reason"] for e in finishes] == ["container_exited_with_error"] * 4 + ["done_by_runner"]
    # The third failure, about 45 s after the first, is the one the new count would not retry.
    assert finishes[2].timestamp - finishes[0].timestamp > 30
    await check_logs(harness, handle)
    await check_patch_guards(await handle.fetch_history(), RETRY_WINDOW)


async def test_a_run_begun_before_the_retry_window_patch_keeps_its_count_once_continued(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/upgrades.md: the answer of `retry-window` is read at the run's start and carried in its
    machine. A run begun without the patch, continued as new after each step by workers that have it
    (from its first failure on), still counts as it did: its third failure, past the new count's window,
    is retried; no execution reads the patch again, and each replays. (The test server skips no time
    across continue-as-new: backoffs of 1, 2 and 4 s, and a 2 s window, keep it short in real time.)"""
    monkeypatch.setattr(retry, "PENDING_BACKOFF_SCHEDULE", (1, 2, 4))
    harness.backend.watch_script = {(0, 0, n): exited(1) for n in range(3)}
    conf = configuration(retry={"on_events": ["error"], "duration": "2s"})
    with without_patch(RETRY_WINDOW):
        inp = await harness.run_input(conf)  # submitted by a release before revisions: it asks
        handle = await harness.client.start_workflow(
            RunWorkflow.run,
            inp.model_copy(update={"continue_as_new_each_step": True}),
            id=run_workflow_id(PROJECT, "train"),
            task_queue=harness.queue,
        )
        await harness.wait_until(
            "the first failure",
            lambda: any(
                named(log.ordered(), "status", status="pending") for log in harness.backend.runs.values()
            ),
        )
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.DONE, RunTerminationReason.ALL_JOBS_DONE)
    events = harness.run_events()
    assert [e.context["backoff"] for e in named(events, "retry")] == [1, 2, 4]
    failures = named(events, "job-finish", status="failed")
    assert [e.context["submission"] for e in failures] == [0, 1, 2]
    assert failures[2].timestamp - failures[0].timestamp > 2
    histories = await execution_histories(handle)
    assert len(histories) > 3
    assert not any(RETRY_WINDOW.encode() in e.SerializeToString() for h in histories for e in h.events)
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    for history in histories:
        await replayer.replay_workflow(history)
    await check_continued_log(harness, handle, result)


def test_a_machine_continued_as_new_by_an_earlier_release_keeps_the_old_count() -> None:
    """workflows/run.py `_carried_machine`: a carry written by a release before the patch `retry-window`
    has no `retry_window_restarts`; its run began before the patch, and keeps the old count. A carry of
    this release says which count its run keeps."""
    conf = configuration(retry=RETRY_ON_ERROR)
    inp = RunInput(
        run_id="train-0001", project=PROJECT, run_name="train", user="ana", configuration=conf, submitted_at=0
    )
    for restarts in (False, True):
        machine = submit_run(inp, 0, retry_window_restarts=restarts).machine
        carried = inp.model_copy(update={"carry": RunCarry(machine=machine, next_seq=3)})
        [payload] = pydantic_data_converter.payload_converter.to_payloads([carried])
        [decoded] = pydantic_data_converter.payload_converter.from_payloads([payload], [RunInput])
        assert decoded.carry is not None and _carried_machine(decoded.carry).retry_window_restarts is restarts
        data = json.loads(payload.data)
        del data["carry"]["machine"]["retry_window_restarts"]
        earlier = RunInput.model_validate_json(json.dumps(data))
        assert earlier.carry is not None and earlier.carry.machine == machine.model_copy(
            update={"retry_window_restarts": False}
        )
        assert _carried_machine(earlier.carry).retry_window_restarts is True


async def test_master_done_ends_the_run(harness: Harness) -> None:
    """docs/runs.md STEP 2, `stop_criteria: master-done`: node 0 exits 0 while node 1 still runs; the run
    ends DONE and node 1 is stopped (as dstack does, for ALL_JOBS_DONE, i.e. DONE_BY_RUNNER)."""
    harness.backend.watch_script = {(0, 0, 0): BLOCK, (0, 1, 0): BLOCK}
    handle = await harness.start(configuration(nodes=2, stop_criteria="master-done"))
    await harness.wait_for(handle, "both nodes to run", lambda s: s.status == RunStatus.RUNNING)
    await harness.wait_until("both watches", lambda: len(harness.backend.called(names.WATCH_JOB)) == 2)
    # Node 0 (the master) exits 0: its watch is answered as if its process had ended by itself.
    harness.backend.finish_watch((0, 0, 0), exited(0))
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.DONE, RunTerminationReason.ALL_JOBS_DONE)
    [stop] = harness.backend.called(names.STOP_TASK, (0, 1, 0))
    assert isinstance(stop, StopTask)
    assert (stop.reason, stop.timeout) == (JobTerminationReason.DONE_BY_RUNNER, 300)
    assert harness.backend.called(names.STOP_TASK, (0, 0, 0)) == []
    node1 = harness.backend.jobs[(0, 1, 0)]
    assert (node1.status, node1.reason) == ("done", "done_by_runner")
    assert harness.backend.called(names.RELEASE_TASK, (0, 1, 0)) != []
    await check_logs(harness, handle)


async def test_stop_during_provisioning(harness: Harness) -> None:
    """docs/runs.md STEP 4-5 and job STEP 5: a stop while the task is being prepared cancels that activity,
    releases the instance, and ends the job TERMINATED (TERMINATED_BY_USER), the run TERMINATED."""
    harness.backend.prepare_script[(0, 0, 0)] = BLOCK
    handle = await harness.start(configuration())
    await harness.wait_for(handle, "provisioning", lambda s: s.status == RunStatus.PROVISIONING)
    await harness.wait_until("prepare_task", lambda: harness.backend.called(names.PREPARE_TASK) != [])
    reply = await harness.stop(handle)
    assert reply.status in (RunStatus.PROVISIONING, RunStatus.TERMINATING)
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.STOPPED_BY_USER,
    )
    job = harness.backend.jobs[(0, 0, 0)]
    assert (job.status, job.reason) == ("terminated", "terminated_by_user")
    assert harness.backend.cancelled == [(names.PREPARE_TASK, (0, 0, 0))]
    calls = [name for name, _, _ in harness.backend.calls]
    assert calls[-1] == names.RELEASE_TASK
    assert names.START_JOB not in calls and names.WATCH_JOB not in calls
    await check_logs(harness, handle)


async def test_abort_running_job(harness: Harness) -> None:
    """docs/runs.md STEP 4-5: `stop -x` (ABORTED_BY_USER) stops the job with no grace (timeout 0); the job
    ends ABORTED and the run TERMINATED."""
    harness.backend.watch_script = {(0, 0, 0): BLOCK}
    handle = await harness.start(configuration())
    await harness.wait_for(handle, "running", lambda s: s.status == RunStatus.RUNNING)
    await harness.stop(handle, abort=True)
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.ABORTED_BY_USER,
    )
    [stop] = harness.backend.called(names.STOP_TASK)
    assert (stop.reason, stop.timeout) == (JobTerminationReason.ABORTED_BY_USER, 0)
    job = harness.backend.jobs[(0, 0, 0)]
    assert (job.status, job.reason) == ("aborted", "aborted_by_user")
    await check_logs(harness, handle)


async def test_stop_sent_with_the_start(harness: Harness) -> None:
    """docs/runs.md STEP 1 and 4: a stop that reaches the run with its start (update-with-start) waits for
    the run's first step, then terminates it: no job ever runs."""
    # The job waits for capacity (the local instance is out of service), so none is placed before the
    # stop: the time-skipping server cannot cancel an activity in the workflow task that completes it
    # (temporalio/sdk-java#2391), a race a quick placement would invite here.
    await harness.start_fleet(LOCAL_FLEET)
    await harness.fleet().signal(
        FleetWorkflow.instance_unreachable, InstanceChange(name="local", status="ready")
    )
    start = WithStartWorkflowOperation(
        RunWorkflow.run,
        await harness.run_input(configuration()),
        id=run_workflow_id(PROJECT, "train"),
        task_queue=harness.queue,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
    )
    reply = await harness.client.execute_update_with_start_workflow(
        RunWorkflow.stop, StopRequest(), start_workflow_operation=start
    )
    assert reply.status == RunStatus.SUBMITTED
    handle = await start.workflow_handle()
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.STOPPED_BY_USER,
    )
    assert harness.backend.called(names.PREPARE_TASK) == []
    job = harness.backend.jobs[(0, 0, 0)]
    assert (job.status, job.reason) == ("terminated", "terminated_by_user")
    fleet = await harness.describe_fleet()
    assert fleet.queue == [] and fleet.idle  # the withdrawn job's request left the queue
    await check_logs(harness, handle)


async def test_abort_during_graceful_stop(harness: Harness) -> None:
    """docs/runs.md STEP 4 / job STEP 5: a job that ignores SIGTERM is in its grace period after a stop;
    an abort then kills it at once (a second stop_task, timeout 0) instead of waiting out the 300 s."""
    harness.backend.watch_script = {(0, 0, 0): TRAP}
    handle = await harness.start(configuration())
    await harness.wait_for(handle, "running", lambda s: s.status == RunStatus.RUNNING)
    await harness.stop(handle)
    await harness.wait_until("the graceful stop", lambda: len(harness.backend.called(names.STOP_TASK)) == 1)
    reply = await harness.stop(handle, abort=True)
    assert reply.status == RunStatus.TERMINATING
    # Real time only: the abort is heard while the job's 330 s timer is far from firing.
    await harness.wait_until("the abort", lambda: len(harness.backend.called(names.STOP_TASK)) == 2)
    assert [s.timeout for s in harness.backend.called(names.STOP_TASK)] == [300, 0]
    result = await harness.result(handle)
    # The first reason stays (docs/jobs.md: the job was terminating already); the abort only cut the grace.
    assert (result.status, result.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.STOPPED_BY_USER,
    )
    job = harness.backend.jobs[(0, 0, 0)]
    assert (job.status, job.reason) == ("terminated", "terminated_by_user")
    assert named(harness.job_events((0, 0, 0)), "exception", type="lost") == []
    await check_logs(harness, handle)


async def test_stop_while_pending(harness: Harness) -> None:
    """docs/runs.md STEP 3-5: a stop during the PENDING backoff cancels the resubmission; the run ends
    TERMINATED with no new submission."""
    harness.backend.watch_script = {(0, 0, 0): exited(1)}
    handle = await harness.start(configuration(retry=RETRY_ON_ERROR))
    await harness.wait_for(handle, "pending", lambda s: s.status == RunStatus.PENDING)
    await harness.stop(handle)
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (
        RunStatus.TERMINATED,
        RunTerminationReason.STOPPED_BY_USER,
    )
    events = harness.run_events()
    assert named(events, "retry") == []
    assert named(events, "job-submit", submission=1) == []
    await check_logs(harness, handle)


async def test_failure_without_retry_stops_other_replicas(harness: Harness) -> None:
    """docs/runs.md STEP 2 (a non-retryable failure comes first) and STEP 4: a replica fails with no retry
    configured; the run terminates its other replica (TERMINATED_BY_SERVER) and ends FAILED."""
    harness.backend.watch_script = {(0, 0, 0): BLOCK, (1, 0, 0): exited(2)}
    handle = await harness.start(configuration("service", replicas=2))
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    [stop] = harness.backend.called(names.STOP_TASK, (0, 0, 0))
    assert stop.reason == JobTerminationReason.TERMINATED_BY_SERVER
    replica0, replica1 = harness.backend.jobs[(0, 0, 0)], harness.backend.jobs[(1, 0, 0)]
    assert (replica0.status, replica0.reason) == ("terminated", "terminated_by_server")
    assert (replica1.status, replica1.reason) == ("failed", "container_exited_with_error")
    assert named(harness.run_events(), "job-finish", replica=1)[0].context["exit_status"] == 2
    await check_logs(harness, handle)


def volume_error() -> ApplicationError:
    return ApplicationError("no such volume", type="VOLUME_ERROR", non_retryable=True)


async def test_job_fails_to_start(harness: Harness) -> None:
    """Job STEP 3: starting the job fails for a reason the activity names (its error type); the job
    ends FAILED for that reason, after its instance is released, and the run ends FAILED."""
    harness.backend.start_script[(0, 0, 0)] = volume_error
    handle = await harness.start(configuration())
    result = await harness.result(handle)
    assert (result.status, result.termination_reason) == (RunStatus.FAILED, RunTerminationReason.JOB_FAILED)
    job = harness.backend.jobs[(0, 0, 0)]
    assert (job.status, job.reason) == ("failed", "volume_error")
    [exception] = named(harness.job_events((0, 0, 0)), "exception")
    assert exception.context["note"] == "no such volume"
    assert harness.backend.called(names.WATCH_JOB) == []
    assert harness.backend.called(names.RELEASE_TASK) != []
    await check_logs(harness, handle)
