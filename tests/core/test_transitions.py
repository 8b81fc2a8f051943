"""The workflows' small pure choices: a job's outcome as events, failure reasons, pending resubmission."""

from __future__ import annotations

from typing import Any

from core.eventlog import Event
from core.jobs.state_machine import JobState, apply_job_event, replay_job
from core.jobs.transitions import (
    job_status_message,
    last_note,
    outcome_events,
    publish_address,
    published_ports,
    reason_for_failure,
    stop_event,
)
from core.runs.pending import replicas_to_resubmit
from core.runs.state_machine import replay_run
from core.runs.status_words import status_message
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from core.wire.agent_api import ClusterInfo, PortBinding
from core.wire.job_messages import Placement, TerminateJobRequest
from core.wire.messages import JobOutcome
from core.wire.workflow_ids import LOCAL_INSTANCE

R = JobTerminationReason


def ev(t: float, name: str, **context: Any) -> Event:
    return Event(timestamp=t, name=name, context=context)


RUNNING = replay_job(
    [ev(0, "submit", replica=0, job=0, submission=0), ev(1, "alloc"), ev(2, "pull"), ev(3, "start")]
)


def after(state: JobState, outcome: JobOutcome) -> JobState:
    for t, (name, context) in enumerate(outcome_events(state, outcome), start=10):
        state = apply_job_event(state, ev(t, name, **{k: v for k, v in context.items() if v is not None}))
    return state


def test_own_exit_is_a_finish() -> None:
    assert outcome_events(RUNNING, JobOutcome(termination_reason=R.DONE_BY_RUNNER, exit_status=0)) == [
        ("finish", {"status": 0})
    ]
    failed = after(RUNNING, JobOutcome(termination_reason=R.CONTAINER_EXITED_WITH_ERROR, exit_status=3))
    assert (failed.status, failed.termination_reason, failed.exit_status) == (
        JobStatus.TERMINATING,
        R.CONTAINER_EXITED_WITH_ERROR,
        3,
    )


def test_another_reason_is_an_exception_then_the_exit() -> None:
    outcome = JobOutcome(
        termination_reason=R.MAX_DURATION_EXCEEDED, termination_message="2s", exit_status=143
    )
    events = outcome_events(RUNNING, outcome)
    assert [name for name, _ in events] == ["exception", "finish"]
    assert events[0][1]["type"] == "timelimit"
    state = after(RUNNING, outcome)
    assert (state.termination_reason, state.exit_status, last_note(state)) == (
        R.MAX_DURATION_EXCEEDED,
        143,
        "2s",
    )


def test_no_exit_status_is_an_exception_alone() -> None:
    lost = JobOutcome(termination_reason=R.INSTANCE_UNREACHABLE, termination_message="silent")
    assert outcome_events(RUNNING, lost) == [
        ("exception", {"type": "lost", "severity": 0, "reason": R.INSTANCE_UNREACHABLE, "note": "silent"})
    ]


def test_a_stopped_job_keeps_its_reason() -> None:
    stopping = apply_job_event(
        RUNNING, ev(5, "exception", type="cancel", severity=0, reason="terminated_by_user")
    )
    killed = JobOutcome(termination_reason=R.TERMINATED_BY_USER, exit_status=None)
    assert outcome_events(stopping, killed) == []
    exited = after(stopping, JobOutcome(termination_reason=R.TERMINATED_BY_USER, exit_status=143))
    assert (exited.termination_reason, exited.exit_status) == (R.TERMINATED_BY_USER, 143)


def test_reason_for_failure() -> None:
    assert reason_for_failure("VOLUME_ERROR", R.EXECUTOR_ERROR) == R.VOLUME_ERROR
    assert reason_for_failure("WaitingForCapacity", R.EXECUTOR_ERROR) == R.EXECUTOR_ERROR
    assert reason_for_failure(None, R.EXECUTOR_ERROR) == R.EXECUTOR_ERROR


def test_pending_run_resubmits_its_failed_replicas() -> None:
    state = replay_run(
        [
            ev(0, "submit", run_name="web", project="p", user="u", type="service"),
            ev(0, "job-submit", replica=0, job=0, submission=0),
            ev(0, "job-submit", replica=1, job=0, submission=0),
            ev(1, "job-finish", replica=0, job=0, submission=0, status="done", reason="done_by_runner"),
            ev(
                2,
                "job-status",
                replica=1,
                job=0,
                submission=0,
                status="terminating",
                reason="instance_unreachable",
            ),
            ev(2, "status", status="pending"),
        ]
    )
    assert replicas_to_resubmit(state) == [1]  # still cleaning up, but failed: resubmitted
    assert status_message(state) == "retrying"
    done = state.model_copy(
        update={"status": RunStatus.DONE, "termination_reason": RunTerminationReason.ALL_JOBS_DONE}
    )
    assert status_message(done) == "all jobs done"


def test_a_stop_asked_by_the_run_is_a_cancel_and_a_lost_instance_is_not() -> None:
    stopped = stop_event(TerminateJobRequest(reason=R.TERMINATED_BY_USER))
    assert stopped == (
        "exception",
        {"type": "cancel", "severity": 0, "reason": R.TERMINATED_BY_USER, "note": "stopped by the run"},
    )
    lost = stop_event(TerminateJobRequest(reason=R.INSTANCE_UNREACHABLE, message="gone"))
    assert lost[1]["type"] == "lost" and lost[1]["note"] == "gone"
    name, context = lost
    assert apply_job_event(RUNNING, ev(10, name, **context)).termination_reason == R.INSTANCE_UNREACHABLE


def test_a_running_job_says_where_its_container_published_its_ports() -> None:
    # A bridged container's ports go to ephemeral host ports, kept in the task's state
    # (docs/containers.md#networks).
    ports = [PortBinding(container_port=8000, host_port=41234), PortBinding(container_port=22, host_port=22)]
    published = published_ports(ports)
    assert published == "8000->41234"
    assert published_ports([PortBinding(container_port=22, host_port=22)]) is None
    assert job_status_message(RUNNING) is None
    running = apply_job_event(RUNNING, ev(4, "memo", ports=published))
    assert job_status_message(running) == "ports 8000->41234"
    done = after(running, JobOutcome(termination_reason=R.DONE_BY_RUNNER, exit_status=0))
    assert job_status_message(done) is None


def test_a_bridged_container_publishes_where_the_proxy_reaches_it() -> None:
    # docs/containers.md#networks: loopback on this machine, the host's address on an SSH host.
    local = Placement(instance_name=LOCAL_INSTANCE, cluster=ClusterInfo(), shared=True)
    remote = Placement(
        instance_name="gpu-0",
        cluster=ClusterInfo(master_node_ip="10.0.0.7", node_ips=["10.0.0.7"]),
        shared=True,
    )
    assert publish_address(local) == "127.0.0.1"
    assert publish_address(remote) == "10.0.0.7"
