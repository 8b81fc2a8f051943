"""An array's elements in one workflow (core.jobs.elements, workflows/elements.py): each element's eventlog
through the phases the workflow batches, folded as a JobWorkflow's would be, without Temporal."""

from __future__ import annotations

from core.jobs.elements import (
    Element,
    ElementPhase,
    cleaned,
    end_if_over,
    failed_to_start,
    fleet_not_running,
    needs_removal,
    new_element,
    placement_step,
    started,
    stop_needed,
    stop_sent,
)
from core.jobs.transitions import job_update, start_job
from core.runs.arrays import shard_count, shard_of, shard_parallel, share_one_workflow, unheard
from core.runs.lifecycle import submit_run
from core.runs.run_state import RunJob
from core.runs.state_machine import _with_job as with_job
from core.runs.submissions import job_input
from core.status import JobStatus as S
from core.status import JobTerminationReason as R
from core.wire.agent_api import ClusterInfo
from core.wire.job_messages import JobInput, JobUpdate, Placement, TerminateJobRequest
from core.wire.messages import JobOutcome
from tests.core.test_run_lifecycle import T0, run_input


def element_input(index: int = 0, **conf: object) -> JobInput:
    inp = run_input("task", array=4, **conf)
    return job_input(inp, submit_run(inp, T0).machine.state, "ferry/main/wf", index, 0)


def placement() -> Placement:
    return Placement(
        instance_name="local",
        cluster=ClusterInfo(),
        watched=True,
    )


def names(element: Element) -> list[str]:
    return [event.name for event in element.events]


def test_an_element_placed_started_and_ended_logs_what_a_job_does() -> None:
    element = new_element(element_input(2), T0)
    assert element.id.endswith("-r2-j0-s0") and element.state.status == S.SUBMITTED
    assert not placement_step(element, T0)  # no answer from the fleet yet
    element.phase = ElementPhase.PLACING
    element.control = element.control.on_placed(placement())
    assert placement_step(element, T0 + 1) and element.phase == ElementPhase.STARTING
    started(element, T0 + 2, None)
    assert element.state.status == S.RUNNING and not end_if_over(element, T0 + 3)
    outcome = JobOutcome(termination_reason=R.DONE_BY_RUNNER, exit_status=0, task_id=element.id)
    element.control = element.control.on_task_ended(outcome, element.id)
    assert end_if_over(element, T0 + 4) and element.phase == ElementPhase.ENDED
    assert needs_removal(element) and element.control.must_release()
    cleaned(element, T0 + 5, None)
    assert element.phase == ElementPhase.DONE and element.state.status == S.DONE
    assert names(element) == ["submit", "alloc", "pull", "start", "finish", "release", "free", "clean"]
    assert element.unsent and element.state.exit_status == 0


def test_another_tasks_end_is_not_the_elements() -> None:
    element = new_element(element_input(), T0)
    other = JobOutcome(termination_reason=R.DONE_BY_RUNNER, exit_status=0, task_id="someone-else")
    element.control = element.control.on_task_ended(other, element.id)
    assert element.control.ended is None


def test_a_queued_element_says_so_once_and_a_refused_one_fails_for_capacity() -> None:
    element = new_element(element_input(), T0)
    element.phase = ElementPhase.PLACING
    element.control = element.control.on_queued()
    assert not placement_step(element, T0) and element.state.memo.get("waiting") == "capacity"
    assert not placement_step(element, T0)  # logged once
    assert names(element).count("memo") == 1
    element.control = element.control.on_refused("no instance has 9 GPUs")
    placement_step(element, T0 + 1)
    assert element.phase == ElementPhase.ENDED and not element.control.must_release()
    assert not needs_removal(element)
    cleaned(element, T0 + 2, None)
    assert element.state.termination_reason == R.FAILED_TO_START_DUE_TO_NO_CAPACITY
    assert element.state.status == S.FAILED


def test_an_element_stopped_while_it_waits_withdraws_its_request() -> None:
    element = new_element(element_input(), T0)
    element.phase = ElementPhase.PLACING
    element.control = element.control.on_terminate(TerminateJobRequest(reason=R.TERMINATED_BY_USER))
    placement_step(element, T0)
    assert element.phase == ElementPhase.ENDED and element.control.must_release()  # the fleet drops it
    cleaned(element, T0 + 1, None)
    assert element.state.status == S.TERMINATED and "alloc" not in names(element)


def test_a_running_element_stopped_gets_one_stop_and_an_abort_after_and_ends_past_its_deadline() -> None:
    element = new_element(element_input(), T0)
    element.control = element.control.on_placed(placement())
    element.phase = ElementPhase.PLACING
    placement_step(element, T0)
    started(element, T0, None)
    assert stop_needed(element) is None
    element.control = element.control.on_terminate(TerminateJobRequest(reason=R.TERMINATED_BY_USER))
    request = stop_needed(element)
    assert request is not None and not request.abort
    stop_sent(element, request, T0 + 1, 30.0)
    assert stop_needed(element) is None  # sent once
    abort = TerminateJobRequest(reason=R.ABORTED_BY_USER, abort=True)
    element.control = element.control.on_terminate(abort)
    request = stop_needed(element)
    assert request is not None and request.abort and request.reason == R.TERMINATED_BY_USER  # first reason
    stop_sent(element, request, T0 + 2, 30.0)
    assert element.stop_deadline == T0 + 2 + 30.0  # an abort has no grace: the earlier deadline
    assert not end_if_over(element, T0 + 31) and end_if_over(element, T0 + 33)
    # Its stop's reason stands, as a JobWorkflow's does; the agent is presumed gone.
    assert element.state.termination_reason == R.TERMINATED_BY_USER
    assert element.phase == ElementPhase.ENDED


def test_an_element_on_a_lost_instance_ends_at_once_and_removes_nothing() -> None:
    element = new_element(element_input(), T0)
    element.control = element.control.on_placed(placement())
    element.phase = ElementPhase.PLACING
    placement_step(element, T0)
    started(element, T0, "8000->31000")
    assert element.state.memo["ports"] == "8000->31000"
    lost = TerminateJobRequest(reason=R.INSTANCE_UNREACHABLE, message="local is gone", instance_gone=True)
    element.control = element.control.on_terminate(lost)
    assert stop_needed(element) is None and end_if_over(element, T0 + 1)
    assert not needs_removal(element)
    cleaned(element, T0 + 2, None)
    assert element.state.termination_reason == R.INSTANCE_UNREACHABLE
    assert any(e.name == "exception" and "is gone" in str(e.context.get("note")) for e in element.events)


def test_a_failed_start_and_a_fleet_not_running_fail_the_element_with_their_reason() -> None:
    element = new_element(element_input(), T0)
    element.control = element.control.on_placed(placement())
    element.phase = ElementPhase.PLACING
    placement_step(element, T0)
    failed_to_start(element, T0, R.EXECUTOR_ERROR, "the agent on local refused the task: no space")
    cleaned(element, T0, "could not remove the task from local: gone")
    assert element.state.termination_reason == R.EXECUTOR_ERROR and element.state.status == S.FAILED
    orphan = new_element(element_input(1), T0)
    fleet_not_running(orphan, T0)
    cleaned(orphan, T0, None)
    assert orphan.state.termination_reason == R.FAILED_TO_START_DUE_TO_NO_CAPACITY


def test_arrays_with_named_volumes_or_a_utilization_policy_keep_a_workflow_per_element() -> None:
    assert share_one_workflow(element_input())
    watched = element_input(utilization_policy={"min_gpu_utilization": 10, "time_window": "30m"})
    assert not share_one_workflow(watched)


def test_an_arrays_elements_are_shared_among_up_to_four_workflows_whose_shares_add_up() -> None:
    assert [shard_count(n) for n in (1, 16, 31, 32, 64, 1000)] == [1, 1, 1, 2, 4, 4]
    for parallel in (1, 17, 64, 65, 1000):
        shards = shard_count(parallel)
        assert sum(shard_parallel(parallel, shards, s) for s in range(shards)) == parallel
    assert [shard_of(i, 4) for i in range(6)] == [0, 1, 2, 3, 0, 1]


def update(element: Element, start: int, end: int) -> JobUpdate:
    return job_update(element.input, element.state, T0, start, element.events[start:end])


def test_the_run_drops_what_it_heard_of_an_element_and_keeps_the_rest() -> None:
    element = new_element(element_input(), T0)
    element.log(T0, "alloc", {"instance": "local"})
    started(element, T0, None)  # events 0..3: submit, alloc, pull, start
    heard: dict[str, int] = {}
    assert len(unheard([update(element, 0, 2)], heard)) == 1 and heard[element.id] == 2
    assert unheard([update(element, 0, 2)], heard) == []  # the same news again
    [rest] = unheard([update(element, 1, 4)], heard)  # a redone task's news, overlapping
    assert rest.record.start_seq == 2 and [e.name for e in rest.record.events] == ["pull", "start"]
    assert heard[element.id] == 4


def test_a_runs_jobs_stay_sorted_and_are_found_by_bisection_whatever_order_they_change_in() -> None:
    state = submit_run(run_input("task", array=4), T0).machine.state
    order = [(7, 0), (2, 1), (9, 0), (2, 0), (0, 3), (7, 0), (2, 1)]
    for number, (replica, job_num) in enumerate(order):
        times = {"first_submitted_at": T0, "submitted_at": T0}
        job = RunJob(replica_num=replica, job_num=job_num, submission_num=number, **times)
        state = with_job(state, job)
    keys = [(j.replica_num, j.job_num) for j in state.jobs]
    assert keys == sorted(set(keys)) and len(keys) == len(set(keys))
    assert state.job(7, 0) is not None and state.job(7, 0).submission_num == 5  # type: ignore[union-attr]
    assert state.job(2, 1).submission_num == 6  # type: ignore[union-attr]
    assert state.job(5, 0) is None and state.job(10, 0) is None


def test_a_start_says_whether_its_run_calls_ferrys_api() -> None:
    """So that a start reads the run's record only for `dstack: true` (activities/secrets.py)."""
    assert start_job(element_input(1), "j", placement()).api_access is False
    assert start_job(element_input(1, dstack=True), "j", placement()).api_access is True
