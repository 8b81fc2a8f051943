"""The run's lifecycle as one pure step (docs/runs.md): `submit_run` and `advance`, fed job news, no Temporal.

Every test builds a `RunInput` from a real configuration, feeds `advance` inboxes of `JobUpdate`s (as
`core.jobs.transitions.job_update` builds them) and checks the events logged, the effects asked for and
the machine (status, retry_at/wake_at, told, unheard, done).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from core.configuration import parse_configuration
from core.eventlog import Event
from core.runs.effects import Effect, SetQueuedPriority, StartJob, TerminateJob
from core.runs.lifecycle import Inbox, advance, plan_of, submit_run, update_events
from core.runs.machine import RunMachine, RunPlan, Step, StepBuilder, StopKind, stronger_stop
from core.runs.retry import PENDING_BACKOFF_SCHEDULE
from core.runs.state_machine import apply_run_event, replay_run
from core.runs.workflow_messages import RunInput
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason
from core.wire.job_messages import JobUpdate
from core.wire.messages import RecordJob
from core.wire.workflow_ids import job_submission_id, placement_request_id

S = JobStatus
R = JobTerminationReason
RS = RunStatus
RR = RunTerminationReason

RUN_ID = "run-1"
T0 = 1000.0
SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}
ON_ERROR = {"on_events": ["error"]}
SIBLING_MESSAGE = "its replica is resubmitted"

Key = tuple[int, int, int]  # (replica, job, submission)


# --- helpers -----------------------------------------------------------------------------------------


def run_input(kind: str = "task", **fields: Any) -> RunInput:
    """A run of a real configuration (as tests/workflows/harness.py makes them), submitted at T0."""
    data: dict[str, Any] = {"type": kind, "resources": SMALL, **fields}
    if kind != "dev-environment":
        data.setdefault("commands", ["train"])
    if kind == "service":
        data.setdefault("port", 8000)
    return RunInput(
        run_id=RUN_ID,
        project="main",
        run_name="train",
        user="ana",
        configuration=parse_configuration(data),
        submitted_at=T0,
    )


def news(
    key: Key,
    status: JobStatus,
    reason: JobTerminationReason | None = None,
    *,
    at: float = T0,
    exit_status: int | None = None,
    instance: str | None = "host-0",
) -> JobUpdate:
    """A job submission's news for its run, as `core.jobs.transitions.job_update` builds it."""
    replica, job, submission = key
    if status.is_finished() and reason is None:
        reason = R.DONE_BY_RUNNER if status == S.DONE else None
    return JobUpdate(
        replica_num=replica,
        job_num=job,
        submission_num=submission,
        timestamp=at,
        record=RecordJob(
            job_submission_id=job_submission_id(RUN_ID, replica, job, submission),
            run_id=RUN_ID,
            replica_num=replica,
            job_num=job,
            submission_num=submission,
            status=status,
            termination_reason=reason,
            exit_status=exit_status,
            instance_name=None if status == S.SUBMITTED else instance,
            submitted_at=T0,
            finished_at=at if status.is_finished() else None,
            start_seq=0,
            events=[],
        ),
    )


def finished(key: Key, reason: JobTerminationReason, *, at: float = T0, **kw: Any) -> JobUpdate:
    return news(key, reason.to_status(), reason, at=at, **kw)


def step(
    machine: RunMachine,
    *updates: JobUpdate,
    at: float,
    stop: StopKind | None = None,
    priorities: tuple[int, ...] = (),
) -> Step:
    inbox = Inbox(updates=list(updates), stop=stop, priorities=list(priorities))
    return advance(machine, inbox, at)


def said(events: list[Event]) -> list[tuple[str, dict[str, Any]]]:
    """Events as (name, context), to compare with literals."""
    return [(e.name, dict(e.context)) for e in events]


def names(events: list[Event]) -> list[str]:
    return [e.name for e in events]


def keys_of(effects: list[Effect], kind: type[StartJob] | type[TerminateJob]) -> list[Key]:
    """The (replica, job, submission) of each effect of `kind`, in order."""
    return [
        (e.replica_num, e.job_num, e.submission_num)
        for e in effects
        if isinstance(e, StartJob | TerminateJob) and isinstance(e, kind)
    ]


def terminations(effects: list[Effect]) -> list[TerminateJob]:
    return [e for e in effects if isinstance(e, TerminateJob)]


def running(machine: RunMachine, *keys: Key, at: float = T0 + 1) -> RunMachine:
    """Every given submission reports RUNNING in one step."""
    return step(machine, *(news(k, S.RUNNING, at=at) for k in keys), at=at).machine


def hand_built(plan: RunPlan) -> Step:
    """STEP 1 for a plan no configuration makes yet (several replicas of several nodes), as submit_run."""
    submit = Event(
        timestamp=T0, name="submit", context={"run_name": "x", "project": "p", "user": "u", "type": "t"}
    )
    b = StepBuilder(RunMachine(plan=plan, state=apply_run_event(None, submit)), T0)
    for replica in range(plan.replicas):
        b.submit_replica(replica)
    return b.step()


def job_submit(replica: int, job: int, submission: int) -> tuple[str, dict[str, Any]]:
    return ("job-submit", {"replica": replica, "job": job, "submission": submission})


# --- STEP 1 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("inp", "expected_keys"),
    [
        (run_input("task"), [(0, 0, 0)]),
        (run_input("task", nodes=2), [(0, 0, 0), (0, 1, 0)]),
        (run_input("service", replicas=2, retry=ON_ERROR), [(0, 0, 0), (1, 0, 0)]),
        (run_input("dev-environment", ide="vscode"), [(0, 0, 0)]),
    ],
    ids=["task", "task-2-nodes", "service-2-replicas", "dev-environment"],
)
def test_step1_submit_logs_the_run_then_submission_0_of_every_job(
    inp: RunInput, expected_keys: list[Key]
) -> None:
    """docs/runs.md STEP 1: `submit`, then one `job-submit` per (replica, job), each started, all unheard."""
    s = submit_run(inp, T0)
    conf_type = inp.configuration.type
    assert said(s.events) == [
        ("submit", {"run_name": "train", "project": "main", "user": "ana", "type": conf_type}),
        *(job_submit(*k) for k in expected_keys),
    ]
    assert all(e.timestamp == T0 for e in s.events)
    assert sorted(keys_of(s.effects, StartJob)) == expected_keys
    assert all(isinstance(e, StartJob) for e in s.effects)
    m = s.machine
    assert m.state.status == RS.SUBMITTED and m.state == replay_run(s.events)
    assert sorted(m.unheard) == expected_keys
    assert (m.retry_at, m.wake_at, m.told, m.stop, m.finished, m.done) == (None, None, (), None, False, False)
    assert m.plan == plan_of(inp)


def test_step1_starts_node_0_of_each_replica_last() -> None:
    """docs/runs.md STEP 1: node 0 enqueues its whole replica in the fleet, so its StartJob comes last."""
    three_nodes = submit_run(run_input("task", nodes=3), T0)
    assert keys_of(three_nodes.effects, StartJob) == [(0, 2, 0), (0, 1, 0), (0, 0, 0)]
    # Several replicas of several nodes (no configuration makes one yet): node 0 last within each replica.
    plan = RunPlan(run_id=RUN_ID, replicas=2, nodes=2, stop_criteria="all-done", submitted_at=T0)
    assert keys_of(hand_built(plan).effects, StartJob) == [(0, 1, 0), (0, 0, 0), (1, 1, 0), (1, 0, 0)]


def test_plan_of_reads_replicas_nodes_stop_criteria_and_retry_from_the_configuration() -> None:
    """docs/runs.md STEP 1: the replica count and the nodes per replica come from the run type."""
    service = plan_of(run_input("service", replicas=3, retry=True))
    assert (service.replicas, service.nodes, service.stop_criteria) == (3, 1, "all-done")
    assert service.retry is not None and service.retry.duration == 3600 and service.submitted_at == T0
    task = plan_of(run_input("task", nodes=2, stop_criteria="master-done"))
    assert (task.replicas, task.nodes, task.stop_criteria, task.retry) == (1, 2, "master-done", None)


# --- STEP 2 ------------------------------------------------------------------------------------------


def test_step2_news_of_provisioning_then_running_moves_the_run_along() -> None:
    """docs/runs.md STEP 2 rules 4 and 3: PROVISIONING, then RUNNING, derived from the job's news."""
    m = submit_run(run_input("task"), T0).machine
    s = step(m, news((0, 0, 0), S.PROVISIONING, at=T0 + 1), at=T0 + 1)
    assert said(s.events) == [
        ("job-status", {"replica": 0, "job": 0, "submission": 0, "status": "provisioning"}),
        ("status", {"status": "provisioning"}),
    ]
    s = step(s.machine, news((0, 0, 0), S.RUNNING, at=T0 + 2), at=T0 + 2)
    assert said(s.events) == [
        ("job-status", {"replica": 0, "job": 0, "submission": 0, "status": "running"}),
        ("status", {"status": "running"}),
    ]
    assert s.effects == [] and s.machine.state.status == RS.RUNNING
    # The same news again says nothing new; so does SUBMITTED.
    again = step(s.machine, news((0, 0, 0), S.RUNNING, at=T0 + 3), at=T0 + 3)
    assert again.events == [] and again.effects == [] and again.machine == s.machine


def test_step2_one_running_job_of_two_keeps_the_run_running() -> None:
    """docs/runs.md STEP 2 rule 3 beats rule 4: any RUNNING job makes the run RUNNING."""
    m = submit_run(run_input("task", nodes=2), T0).machine
    s = step(m, news((0, 0, 0), S.RUNNING), news((0, 1, 0), S.PROVISIONING), at=T0 + 1)
    assert names(s.events) == ["job-status", "job-status", "status"]
    assert s.machine.state.status == RS.RUNNING


def test_step2_and_step5_all_jobs_done_terminates_and_cleans_in_the_same_step() -> None:
    """docs/runs.md STEP 2 rule 6 then STEP 5: the last job done makes the run TERMINATING all_jobs_done,
    and `clean` DONE at once since every job has finished."""
    m = running(submit_run(run_input("task", nodes=2), T0).machine, (0, 0, 0), (0, 1, 0))
    first = step(m, finished((0, 1, 0), R.DONE_BY_RUNNER, exit_status=0, at=T0 + 5), at=T0 + 5)
    assert names(first.events) == ["job-finish"] and first.machine.state.status == RS.RUNNING
    assert first.machine.unheard == ((0, 0, 0),)
    last = step(first.machine, finished((0, 0, 0), R.DONE_BY_RUNNER, exit_status=0, at=T0 + 6), at=T0 + 6)
    assert said(last.events) == [
        (
            "job-finish",
            {"replica": 0, "job": 0, "submission": 0, "status": "done", "reason": "done_by_runner"}
            | {"exit_status": 0, "provisioned": True},
        ),
        ("status", {"status": "terminating", "reason": "all_jobs_done"}),
        ("clean", {"status": "done", "reason": "all_jobs_done"}),
    ]
    assert last.effects == []
    assert (last.machine.state.status, last.machine.state.termination_reason) == (RS.DONE, RR.ALL_JOBS_DONE)
    assert last.machine.finished and last.machine.done and last.machine.unheard == ()


def test_step2_a_non_retryable_failure_terminates_the_others_for_job_failed() -> None:
    """docs/runs.md STEP 2 rule 1 and STEP 4: a failure that may not be retried makes the run TERMINATING
    job_failed, and every other active job is told TERMINATED_BY_SERVER; STEP 5 once they finish."""
    m = running(submit_run(run_input("service", replicas=2), T0).machine, (0, 0, 0), (1, 0, 0))
    s = step(m, finished((1, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, exit_status=3, at=T0 + 5), at=T0 + 5)
    assert said(s.events)[1:] == [("status", {"status": "terminating", "reason": "job_failed"})]
    assert s.effects == [
        TerminateJob(replica_num=0, job_num=0, submission_num=0, reason=R.TERMINATED_BY_SERVER, abort=False)
    ]
    assert s.machine.told == ((0, 0, 0, False),) and not s.machine.finished
    # The job obeys: TERMINATING, then TERMINATED; nobody is told twice, and the run ends FAILED.
    s = step(s.machine, news((0, 0, 0), S.TERMINATING, R.TERMINATED_BY_SERVER, at=T0 + 6), at=T0 + 6)
    assert names(s.events) == ["job-status"] and s.effects == []
    s = step(s.machine, finished((0, 0, 0), R.TERMINATED_BY_SERVER, at=T0 + 7), at=T0 + 7)
    assert said(s.events)[1:] == [("clean", {"status": "failed", "reason": "job_failed"})]
    assert s.effects == [] and s.machine.done


def test_step2_a_reason_that_is_no_retry_event_fails_the_run_even_with_retry() -> None:
    """docs/runs.md "When a job may be retried" rule 2: MAX_DURATION_EXCEEDED is no retry event."""
    m = running(submit_run(run_input("service", replicas=2, retry=True), T0).machine, (0, 0, 0), (1, 0, 0))
    s = step(m, finished((1, 0, 0), R.MAX_DURATION_EXCEEDED, at=T0 + 5), at=T0 + 5)
    assert "retry" not in names(s.events)
    assert (s.machine.state.status, s.machine.state.termination_reason) == (RS.TERMINATING, RR.JOB_FAILED)
    assert keys_of(s.effects, TerminateJob) == [(0, 0, 0)] and keys_of(s.effects, StartJob) == []


@pytest.mark.parametrize(("failed_after", "status"), [(60, RS.PENDING), (61, RS.FAILED)])
def test_step2_no_capacity_past_the_retry_window_is_retry_limit_exceeded(
    failed_after: int, status: RunStatus
) -> None:
    """docs/runs.md "When a job may be retried" rule 3: a job that never held an instance counts from its
    first submission; past `retry.duration` (inclusive bound) the run fails with RETRY_LIMIT_EXCEEDED."""
    inp = run_input("task", retry={"on_events": ["no-capacity"], "duration": 60})
    m = submit_run(inp, T0).machine
    at = T0 + failed_after
    s = step(m, finished((0, 0, 0), R.FAILED_TO_START_DUE_TO_NO_CAPACITY, instance=None, at=at), at=at)
    assert s.machine.state.status == status
    if status == RS.FAILED:
        assert said(s.events)[1:] == [
            ("status", {"status": "terminating", "reason": "retry_limit_exceeded"}),
            ("clean", {"status": "failed", "reason": "retry_limit_exceeded"}),
        ]
        assert s.machine.retry_at is None and s.effects == []


def test_step2_the_retry_window_restarts_when_the_job_last_held_an_instance() -> None:
    """docs/runs.md `retry_window_start`: once a submission held an instance, the window counts from the
    last moment one did, so an error after a long run is retried, and a resubmission that then finds no
    capacity fails the run only `retry.duration` after the instance was lost."""
    inp = run_input("task", retry={"on_events": ["error", "no-capacity"], "duration": 60})
    m = running(submit_run(inp, T0).machine, (0, 0, 0), at=T0 + 1)
    m = step(m, finished((0, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 1000), at=T0 + 1000).machine
    assert m.state.status == RS.PENDING  # 999 s after its submission, 0 s after losing its instance
    m = step(m, at=T0 + 1015).machine
    assert m.state.status == RS.SUBMITTED
    no_capacity = finished((0, 0, 1), R.FAILED_TO_START_DUE_TO_NO_CAPACITY, instance=None, at=T0 + 1061)
    s = step(m, no_capacity, at=T0 + 1061)
    assert (s.machine.state.status, s.machine.state.termination_reason) == (
        RS.FAILED,
        RR.RETRY_LIMIT_EXCEEDED,
    )


def retried_until_it_ends(
    inp: RunInput,
    life: Callable[[Key, float], list[JobUpdate]],
    *,
    most: int = 12,
    retry_window_restarts: bool = False,
) -> tuple[RunMachine, list[float]]:
    """Each submission of job (0, 0) sends `life(key, when it was submitted)`, one news a step, the last
    its failure; the run resubmits it once its backoff is over, until it retries no more (or `most`
    submissions failed). The machine then, and when each submission failed. `retry_window_restarts`: a
    run begun before the patch `retry-window`."""
    m = submit_run(inp, T0, retry_window_restarts=retry_window_restarts).machine
    submitted_at, failures = T0, []
    for submission in range(most):
        for update in life((0, 0, submission), submitted_at):
            m = step(m, update, at=update.timestamp).machine
        failures.append(m.state.status_since)
        if m.state.status != RS.PENDING or submission == most - 1:
            break
        submitted_at = m.retry_at or 0.0
        assert submitted_at > 0
        m = step(m, at=submitted_at).machine
        assert m.state.job(0, 0).submission_num == submission + 1  # type: ignore[union-attr]
    return m, failures


def test_step2_a_job_failing_at_once_after_each_placement_is_retried_only_within_the_window() -> None:
    """docs/runs.md "When a job may be retried", a retry's failure: a job that exits 1 a second after
    each placement is retried while within `retry.duration` of its first failure, then the run fails
    RETRY_LIMIT_EXCEEDED (dstack's clock, restarting at each failure, would retry it for ever)."""
    inp = run_input("task", retry={"on_events": ["error"], "duration": 60})

    def life(key: Key, at: float) -> list[JobUpdate]:
        return [news(key, S.RUNNING, at=at + 1), finished(key, R.CONTAINER_EXITED_WITH_ERROR, at=at + 2)]

    m, failures = retried_until_it_ends(inp, life)
    assert (m.state.status, m.state.termination_reason) == (RS.FAILED, RR.RETRY_LIMIT_EXCEEDED)
    # Backoffs of 15, 30 and 60 s: failures 17, 49 and 111 s after the first; the last is past 60 s.
    assert [f - failures[0] for f in failures] == [0, 17, 49, 111]


def test_step2_a_run_begun_before_the_retry_window_patch_keeps_retrying_a_job_failing_at_once() -> None:
    """docs/runs.md "When a job may be retried": a run begun before the patch `retry-window`
    (`RunMachine.retry_window_restarts`, carried by every step) counts each failure's window as it did
    then, from the end of the latest submission: the job above is retried past 60 s after its first
    failure, until `most` submissions have failed."""
    inp = run_input("task", retry={"on_events": ["error"], "duration": 60})

    def life(key: Key, at: float) -> list[JobUpdate]:
        return [news(key, S.RUNNING, at=at + 1), finished(key, R.CONTAINER_EXITED_WITH_ERROR, at=at + 2)]

    m, failures = retried_until_it_ends(inp, life, most=6, retry_window_restarts=True)
    assert m.retry_window_restarts
    assert (m.state.status, m.state.termination_reason) == (RS.PENDING, None)
    assert m.state.retries == 5
    assert [f - failures[0] for f in failures] == [0, 17, 49, 111, 233, 535]


def test_step2_a_job_preempted_after_each_long_run_is_retried_each_time() -> None:
    """docs/runs.md "When a job may be retried": each run longer than `retry.duration` restarts the window
    where it ended, so a job preempted after three hours, again and again, is never failed by them."""
    inp = run_input("task", retry={"on_events": ["interruption"], "duration": "10m"})

    def life(key: Key, at: float) -> list[JobUpdate]:
        return [
            news(key, S.RUNNING, at=at + 1),
            finished(key, R.INTERRUPTED_BY_NO_CAPACITY, at=at + 3 * 3600),
        ]

    m, failures = retried_until_it_ends(inp, life, most=5)
    assert len(failures) == 5 and m.state.status == RS.PENDING and m.state.termination_reason is None
    assert m.state.retries == 4


def test_step2_a_job_waiting_for_capacity_fails_once_past_the_window_of_its_first_submission() -> None:
    """docs/runs.md "When a job may be retried": no-capacity failures, one after each backoff, count from
    the job's first submission (dstack's run age); the first past `retry.duration` ends the run."""
    inp = run_input("task", retry={"on_events": ["no-capacity"], "duration": 100})

    def life(key: Key, at: float) -> list[JobUpdate]:
        return [finished(key, R.FAILED_TO_START_DUE_TO_NO_CAPACITY, instance=None, at=at + 1)]

    m, failures = retried_until_it_ends(inp, life)
    assert (m.state.status, m.state.termination_reason) == (RS.FAILED, RR.RETRY_LIMIT_EXCEEDED)
    assert [f - T0 for f in failures] == [1, 17, 48, 109]


def test_step2_master_done_terminates_the_other_nodes_with_done_by_runner() -> None:
    """docs/runs.md STEP 2 rule 2: with `stop_criteria: master-done`, the master done ends the run
    (ALL_JOBS_DONE), and the other nodes are told DONE_BY_RUNNER."""
    inp = run_input("task", nodes=2, stop_criteria="master-done")
    m = running(submit_run(inp, T0).machine, (0, 0, 0), (0, 1, 0))
    s = step(m, finished((0, 0, 0), R.DONE_BY_RUNNER, exit_status=0, at=T0 + 5), at=T0 + 5)
    assert said(s.events)[1:] == [("status", {"status": "terminating", "reason": "all_jobs_done"})]
    assert s.effects == [
        TerminateJob(replica_num=0, job_num=1, submission_num=0, reason=R.DONE_BY_RUNNER, abort=False)
    ]
    s = step(s.machine, finished((0, 1, 0), R.DONE_BY_RUNNER, exit_status=0, at=T0 + 6), at=T0 + 6)
    assert said(s.events)[1:] == [("clean", {"status": "done", "reason": "all_jobs_done"})]


def test_step2_without_master_done_the_master_done_alone_changes_nothing() -> None:
    """docs/runs.md STEP 2: with `all-done`, rule 3 applies while another node runs."""
    m = running(submit_run(run_input("task", nodes=2), T0).machine, (0, 0, 0), (0, 1, 0))
    s = step(m, finished((0, 0, 0), R.DONE_BY_RUNNER, exit_status=0, at=T0 + 5), at=T0 + 5)
    assert names(s.events) == ["job-finish"] and s.effects == [] and s.machine.state.status == RS.RUNNING


# --- STEP 2: in-place resubmission -------------------------------------------------------------------


def test_step2_in_place_retry_resubmits_only_the_failed_replica() -> None:
    """docs/runs.md STEP 2 "In-place resubmission": replica 1 fails retryably while replica 0 runs:
    `retry` with backoff 0, submission 1 of replica 1 started at once, replica 0 untouched."""
    inp = run_input("service", replicas=2, retry=ON_ERROR)
    m = running(submit_run(inp, T0).machine, (0, 0, 0), (1, 0, 0))
    s = step(m, finished((1, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, exit_status=1, at=T0 + 5), at=T0 + 5)
    assert said(s.events)[1:] == [
        ("retry", {"replicas": [1], "attempt": 0, "backoff": 0}),
        job_submit(1, 0, 1),
    ]
    assert s.effects == [StartJob(replica_num=1, job_num=0, submission_num=1)]
    assert terminations(s.effects) == []
    m = s.machine
    assert m.state.status == RS.RUNNING and m.retry_at is None and m.state.retries == 1
    assert sorted(m.unheard) == [(0, 0, 0), (1, 0, 1)]
    # A second in-place retry counts as attempt 1, still with no backoff.
    m = running(m, (1, 0, 1), at=T0 + 6)
    s = step(m, finished((1, 0, 1), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 7), at=T0 + 7)
    assert said(s.events)[1:] == [
        ("retry", {"replicas": [1], "attempt": 1, "backoff": 0}),
        job_submit(1, 0, 2),
    ]


def test_step2_in_place_retry_stops_the_still_running_sibling_of_a_multi_node_replica() -> None:
    """docs/runs.md STEP 2 "In-place resubmission": the replica's still-running jobs get a TerminateJob
    (TERMINATED_BY_SERVER, "its replica is resubmitted"), before its new submissions start, node 0 last.
    No configuration makes several replicas of several nodes yet, so the plan is built by hand."""
    plan = RunPlan(
        run_id=RUN_ID,
        replicas=2,
        nodes=2,
        stop_criteria="all-done",
        submitted_at=T0,
        retry=plan_of(run_input("task", retry=ON_ERROR)).retry,
    )
    m = running(hand_built(plan).machine, (0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0))
    s = step(m, finished((1, 1, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 5), at=T0 + 5)
    assert said(s.events)[1:] == [
        ("retry", {"replicas": [1], "attempt": 0, "backoff": 0}),
        job_submit(1, 0, 1),
        job_submit(1, 1, 1),
    ]
    assert s.effects == [
        TerminateJob(
            replica_num=1, job_num=0, submission_num=0, reason=R.TERMINATED_BY_SERVER, message=SIBLING_MESSAGE
        ),
        StartJob(replica_num=1, job_num=1, submission_num=1),
        StartJob(replica_num=1, job_num=0, submission_num=1),
    ]
    assert s.machine.state.status == RS.RUNNING
    # The stopped sibling's last word is still awaited; its news about submission 0 changes nothing.
    assert (1, 0, 0) in s.machine.unheard
    late = step(s.machine, finished((1, 0, 0), R.TERMINATED_BY_SERVER, at=T0 + 6), at=T0 + 6)
    assert late.events == [] and late.effects == [] and (1, 0, 0) not in late.machine.unheard


def test_step3_entering_pending_stops_the_still_running_sibling_of_the_failed_replica() -> None:
    """docs/runs.md STEP 3 (`pending.enter`): a 2-node task whose node 1 failed retryably goes PENDING,
    and node 0, still running, is stopped at once (TERMINATED_BY_SERVER, "its replica is resubmitted")."""
    m = running(submit_run(run_input("task", nodes=2, retry=ON_ERROR), T0).machine, (0, 0, 0), (0, 1, 0))
    s = step(m, finished((0, 1, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 5), at=T0 + 5)
    assert said(s.events)[1:] == [("status", {"status": "pending"})]
    assert s.effects == [
        TerminateJob(
            replica_num=0, job_num=0, submission_num=0, reason=R.TERMINATED_BY_SERVER, message=SIBLING_MESSAGE
        )
    ]
    assert s.machine.retry_at == T0 + 5 + PENDING_BACKOFF_SCHEDULE[0]


def test_step3_a_sibling_already_terminating_is_not_stopped_again() -> None:
    """docs/runs.md STEP 2/3: only active jobs that are not TERMINATING yet are stopped."""
    m = running(submit_run(run_input("task", nodes=2, retry=ON_ERROR), T0).machine, (0, 0, 0), (0, 1, 0))
    s = step(
        m,
        news((0, 0, 0), S.TERMINATING, R.EXECUTOR_ERROR, at=T0 + 4),
        finished((0, 1, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 5),
        at=T0 + 5,
    )
    assert s.machine.state.status == RS.PENDING and s.effects == []


# --- STEP 3 ------------------------------------------------------------------------------------------


def test_step3_pending_waits_out_the_backoff_then_resubmits() -> None:
    """docs/runs.md STEP 3: the only job failed retryably -> PENDING until now + 15; nothing before then;
    at retry_at `retry` (backoff 15), submission 1, status SUBMITTED, and retry_at cleared."""
    m = running(submit_run(run_input("task", retry=ON_ERROR), T0).machine, (0, 0, 0))
    failed_at = T0 + 50
    s = step(m, finished((0, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, exit_status=1, at=failed_at), at=failed_at)
    assert said(s.events)[1:] == [("status", {"status": "pending"})]
    assert s.effects == []
    pending = s.machine
    assert pending.state.status == RS.PENDING
    assert pending.retry_at == pending.wake_at == failed_at + 15
    assert pending.unheard == ()

    early = step(pending, at=failed_at + 14.9)
    assert early.events == [] and early.effects == [] and early.machine == pending

    due = step(pending, at=failed_at + 15)
    assert said(due.events) == [
        ("retry", {"replicas": [0], "attempt": 0, "backoff": 15}),
        job_submit(0, 0, 1),
        ("status", {"status": "submitted"}),
    ]
    assert due.effects == [StartJob(replica_num=0, job_num=0, submission_num=1)]
    assert due.machine.retry_at is None and due.machine.wake_at is None
    assert due.machine.state.status == RS.SUBMITTED and due.machine.unheard == ((0, 0, 1),)


def test_step3_the_backoff_grows_with_the_attempts() -> None:
    """docs/runs.md STEP 3 backoff table: 15, 30, 60, 120, 300, then 600 s."""
    m = submit_run(run_input("task", retry=ON_ERROR), T0).machine
    now = T0
    waits = []
    for submission in range(len(PENDING_BACKOFF_SCHEDULE) + 1):
        now += 1
        m = step(m, finished((0, 0, submission), R.CONTAINER_EXITED_WITH_ERROR, at=now), at=now).machine
        assert m.state.status == RS.PENDING and m.retry_at is not None
        waits.append(m.retry_at - now)
        now = m.retry_at
        s = step(m, at=now)
        assert said(s.events)[0] == ("retry", {"replicas": [0], "attempt": submission, "backoff": waits[-1]})
        m = s.machine
    assert waits == [15, 30, 60, 120, 300, 600, 600]


def test_step3_a_late_wake_still_resubmits_once() -> None:
    """docs/runs.md STEP 3: `now >= retry_at` resubmits; the step after that sees no backoff any more."""
    m = running(submit_run(run_input("task", retry=ON_ERROR), T0).machine, (0, 0, 0))
    m = step(m, finished((0, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 2), at=T0 + 2).machine
    late = step(m, at=T0 + 500)
    assert keys_of(late.effects, StartJob) == [(0, 0, 1)]
    after = step(late.machine, at=T0 + 501)
    assert after.events == [] and after.effects == []


def test_step3_an_in_place_retry_counts_as_an_attempt_for_the_later_backoff() -> None:
    """docs/runs.md STEP 3: `attempt` counts every `retry` logged so far, in-place ones included."""
    inp = run_input("service", replicas=2, retry=ON_ERROR)
    m = running(submit_run(inp, T0).machine, (0, 0, 0), (1, 0, 0))
    m = step(m, finished((1, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 2), at=T0 + 2).machine
    assert m.state.retries == 1
    s = step(
        m,
        finished((0, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 3),
        finished((1, 0, 1), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 3),
        at=T0 + 3,
    )
    assert s.machine.state.status == RS.PENDING and s.machine.retry_at == T0 + 3 + 30
    due = step(s.machine, at=T0 + 33)
    assert said(due.events)[:3] == [
        ("retry", {"replicas": [0, 1], "attempt": 1, "backoff": 30}),
        job_submit(0, 0, 1),
        job_submit(1, 0, 2),
    ]


def test_step3_only_failed_replicas_are_resubmitted_after_the_backoff() -> None:
    """docs/runs.md STEP 3 `replicas_to_resubmit`: a replica whose job is done is not started again."""
    inp = run_input("service", replicas=2, retry=ON_ERROR)
    m = running(submit_run(inp, T0).machine, (0, 0, 0), (1, 0, 0))
    s = step(
        m,
        finished((0, 0, 0), R.DONE_BY_RUNNER, exit_status=0, at=T0 + 3),
        finished((1, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 3),
        at=T0 + 3,
    )
    assert s.machine.state.status == RS.PENDING
    due = step(s.machine, at=T0 + 18)
    assert keys_of(due.effects, StartJob) == [(1, 0, 1)]
    done = step(due.machine, finished((1, 0, 1), R.DONE_BY_RUNNER, at=T0 + 20), at=T0 + 20)
    assert done.machine.state.status == RS.DONE


# --- STEP 4: stop ------------------------------------------------------------------------------------


def test_step4_stop_tells_each_active_job_once_then_abort_tells_them_again() -> None:
    """docs/runs.md STEP 4: `ferry stop` makes the run TERMINATING stopped_by_user and tells every active
    job once (`told`); an abort after it tells them again, with `abort`; STEP 5 once they finished."""
    m = running(submit_run(run_input("service", replicas=2), T0).machine, (0, 0, 0), (1, 0, 0))
    s = step(m, at=T0 + 5, stop=StopKind.STOP)
    assert said(s.events) == [("status", {"status": "terminating", "reason": "stopped_by_user"})]
    assert sorted(keys_of(s.effects, TerminateJob)) == [(0, 0, 0), (1, 0, 0)]
    assert all(t.reason == R.TERMINATED_BY_USER and not t.abort for t in terminations(s.effects))
    assert s.machine.stop == StopKind.STOP and sorted(s.machine.told) == [(0, 0, 0, False), (1, 0, 0, False)]

    again = step(s.machine, at=T0 + 6, stop=StopKind.STOP)
    assert again.events == [] and again.effects == [] and again.machine == s.machine

    aborted = step(s.machine, at=T0 + 7, stop=StopKind.ABORT)
    assert aborted.events == []
    assert sorted(keys_of(aborted.effects, TerminateJob)) == [(0, 0, 0), (1, 0, 0)]
    # The run's reason stays the first one (as the job's does, docs/jobs.md): the abort only cuts the grace.
    assert all(t.abort and t.reason == R.TERMINATED_BY_USER for t in terminations(aborted.effects))
    assert aborted.machine.state.termination_reason == RR.STOPPED_BY_USER
    assert aborted.machine.stop == StopKind.ABORT and len(aborted.machine.told) == 4

    aborted_again = step(aborted.machine, at=T0 + 8, stop=StopKind.ABORT)
    assert aborted_again.effects == [] and aborted_again.events == []

    one = step(
        aborted.machine, finished((0, 0, 0), R.TERMINATED_BY_USER, at=T0 + 9), at=T0 + 9, stop=StopKind.ABORT
    )
    assert names(one.events) == ["job-finish"] and one.effects == []
    both = step(
        one.machine, finished((1, 0, 0), R.TERMINATED_BY_USER, at=T0 + 9), at=T0 + 9, stop=StopKind.ABORT
    )
    assert said(both.events)[1:] == [("clean", {"status": "terminated", "reason": "stopped_by_user"})]
    assert both.machine.done


def test_step4_a_stop_records_who_asked_for_it() -> None:
    """docs/teams.md#who-did-it: the API's caller is the stop's `by`, in the status event it begins."""
    m = running(submit_run(run_input("task"), T0).machine, (0, 0, 0))
    s = advance(m, Inbox(stop=StopKind.STOP, stop_by="bob"), T0 + 5)
    assert said(s.events) == [("status", {"status": "terminating", "reason": "stopped_by_user", "by": "bob"})]
    # The same stop heard again logs nothing, whoever it names.
    assert advance(s.machine, Inbox(stop=StopKind.STOP, stop_by="bob"), T0 + 6).events == []


def test_step4_abort_on_a_running_run_tells_the_jobs_aborted_by_user_with_abort() -> None:
    """docs/runs.md STEP 4: `ferry stop -x` is ABORTED_BY_USER, and the jobs skip their grace period."""
    m = running(submit_run(run_input("task", nodes=2), T0).machine, (0, 0, 0), (0, 1, 0))
    s = step(m, at=T0 + 5, stop=StopKind.ABORT)
    assert said(s.events) == [("status", {"status": "terminating", "reason": "aborted_by_user"})]
    assert sorted(terminations(s.effects), key=lambda t: t.job_num) == [
        TerminateJob(replica_num=0, job_num=n, submission_num=0, reason=R.ABORTED_BY_USER, abort=True)
        for n in (0, 1)
    ]


def test_step4_a_stop_wins_over_the_last_job_finishing_in_the_same_step() -> None:
    """docs/runs.md "One step" 3: a stop on a run not TERMINATING yet comes before STEP 2."""
    m = running(submit_run(run_input("task"), T0).machine, (0, 0, 0))
    s = step(m, finished((0, 0, 0), R.DONE_BY_RUNNER, at=T0 + 5), at=T0 + 5, stop=StopKind.STOP)
    assert said(s.events)[1:] == [
        ("status", {"status": "terminating", "reason": "stopped_by_user"}),
        ("clean", {"status": "terminated", "reason": "stopped_by_user"}),
    ]
    assert s.effects == []


def test_step4_a_stop_while_pending_cancels_the_resubmission() -> None:
    """docs/runs.md STEP 3: a stop while PENDING clears retry_at; every job has finished, so STEP 5 at
    once; nothing is ever resubmitted."""
    m = running(submit_run(run_input("task", retry=ON_ERROR), T0).machine, (0, 0, 0))
    m = step(m, finished((0, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 2), at=T0 + 2).machine
    assert m.retry_at == T0 + 17
    s = step(m, at=T0 + 5, stop=StopKind.STOP)
    assert said(s.events) == [
        ("status", {"status": "terminating", "reason": "stopped_by_user"}),
        ("clean", {"status": "terminated", "reason": "stopped_by_user"}),
    ]
    assert s.effects == [] and s.machine.retry_at is None and s.machine.wake_at is None and s.machine.done
    later = step(s.machine, at=T0 + 100, stop=StopKind.STOP)
    assert later.events == [] and later.effects == []


def test_step4_a_stop_arriving_when_the_backoff_is_over_still_cancels_the_resubmission() -> None:
    """docs/runs.md "One step" 3: the stop comes before a pending backoff that is over."""
    m = running(submit_run(run_input("task", retry=ON_ERROR), T0).machine, (0, 0, 0))
    m = step(m, finished((0, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 2), at=T0 + 2).machine
    s = step(m, at=T0 + 30, stop=StopKind.ABORT)
    assert "retry" not in names(s.events) and keys_of(s.effects, StartJob) == []
    assert s.machine.state.status == RS.TERMINATED and s.machine.retry_at is None


def test_step4_a_stop_while_pending_with_a_sibling_still_running_waits_for_it() -> None:
    """docs/runs.md STEP 3/4: the PENDING run's still-running sibling is told the user's stop too, and the
    run cleans only once it has finished."""
    m = running(submit_run(run_input("task", nodes=2, retry=ON_ERROR), T0).machine, (0, 0, 0), (0, 1, 0))
    m = step(m, finished((0, 1, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 2), at=T0 + 2).machine
    s = step(m, at=T0 + 3, stop=StopKind.STOP)
    assert said(s.events) == [("status", {"status": "terminating", "reason": "stopped_by_user"})]
    assert terminations(s.effects) == [
        TerminateJob(replica_num=0, job_num=0, submission_num=0, reason=R.TERMINATED_BY_USER)
    ]
    end = step(
        s.machine, finished((0, 0, 0), R.TERMINATED_BY_SERVER, at=T0 + 4), at=T0 + 4, stop=StopKind.STOP
    )
    assert names(end.events) == ["job-finish", "clean"] and end.machine.done


# --- priorities --------------------------------------------------------------------------------------


def test_priority_is_logged_and_moves_the_replicas_still_queued() -> None:
    """docs/runs.md "One step" 2: `priority` is logged, and SetQueuedPriority names the replicas whose
    node 0 is still SUBMITTED."""
    m = submit_run(run_input("service", replicas=3), T0).machine
    m = running(m, (0, 0, 0))
    s = step(m, at=T0 + 2, priorities=(7,))
    assert said(s.events) == [("priority", {"priority": 7})]
    waiting = [placement_request_id(RUN_ID, 1, 0), placement_request_id(RUN_ID, 2, 0)]
    assert s.effects == [SetQueuedPriority(request_ids=waiting, priority=7)]
    assert s.machine.state.priority == 7
    two = step(s.machine, at=T0 + 3, priorities=(9, 8))
    assert said(two.events) == [("priority", {"priority": 9}), ("priority", {"priority": 8})]
    assert [e.priority for e in two.effects if isinstance(e, SetQueuedPriority)] == [9, 8]


def test_priority_moves_nothing_once_every_replica_left_the_queue() -> None:
    """docs/runs.md "One step" 2: no replica waiting in the fleet's queue, no SetQueuedPriority."""
    m = running(submit_run(run_input("service", replicas=2), T0).machine, (0, 0, 0), (1, 0, 0))
    s = step(m, at=T0 + 2, priorities=(7,))
    assert said(s.events) == [("priority", {"priority": 7})] and s.effects == []


def test_priority_names_the_placement_request_of_a_resubmitted_replica() -> None:
    """docs/runs.md "One step" 2: a resubmitted replica waits under its new submission's request."""
    inp = run_input("service", replicas=2, retry=ON_ERROR)
    m = running(submit_run(inp, T0).machine, (0, 0, 0), (1, 0, 0))
    m = step(m, finished((1, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 2), at=T0 + 2).machine
    s = step(m, at=T0 + 3, priorities=(5,))
    assert s.effects == [SetQueuedPriority(request_ids=[placement_request_id(RUN_ID, 1, 1)], priority=5)]


# --- a finished run ----------------------------------------------------------------------------------


def test_step5_a_finished_run_only_hears_the_last_words_of_its_older_submissions() -> None:
    """docs/runs.md STEP 5 and "One step" 1: a finished run logs nothing more, sends nothing, but takes
    each last word off `unheard`; it is `done` only once all are heard."""
    m = running(submit_run(run_input("task", nodes=2, retry=ON_ERROR), T0).machine, (0, 0, 0), (0, 1, 0))
    # Node 1 fails: PENDING, and node 0 is told to stop; it does not say a word before the backoff ends.
    m = step(m, finished((0, 1, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 2), at=T0 + 2).machine
    m = step(m, at=T0 + 17).machine
    assert sorted(m.unheard) == [(0, 0, 0), (0, 0, 1), (0, 1, 1)]
    m = running(m, (0, 0, 1), (0, 1, 1), at=T0 + 18)
    m = step(
        m,
        finished((0, 0, 1), R.DONE_BY_RUNNER, at=T0 + 19),
        finished((0, 1, 1), R.DONE_BY_RUNNER, at=T0 + 19),
        at=T0 + 19,
    ).machine
    assert m.state.status == RS.DONE and m.finished and not m.done and m.unheard == ((0, 0, 0),)

    # Any non-final news, a stop and a priority: nothing logged, nothing sent, still waiting.
    quiet = step(
        m,
        news((0, 0, 0), S.TERMINATING, R.TERMINATED_BY_SERVER),
        at=T0 + 20,
        stop=StopKind.ABORT,
        priorities=(3,),
    )
    assert quiet.events == [] and quiet.effects == [] and not quiet.machine.done
    assert quiet.machine.state == m.state
    last = step(quiet.machine, finished((0, 0, 0), R.TERMINATED_BY_SERVER, at=T0 + 21), at=T0 + 21)
    assert last.events == [] and last.effects == []
    assert last.machine.unheard == () and last.machine.done and last.machine.state == m.state


# --- news of an older submission ---------------------------------------------------------------------


def test_news_of_an_older_submission_changes_nothing() -> None:
    """docs/runs.md "One step" 1: news about an older submission of a resubmitted replica changes nothing."""
    inp = run_input("service", replicas=2, retry=ON_ERROR)
    m = running(submit_run(inp, T0).machine, (0, 0, 0), (1, 0, 0))
    m = step(m, news((1, 0, 0), S.TERMINATING, R.EXECUTOR_ERROR, at=T0 + 2), at=T0 + 2).machine
    current = m.state.job(1, 0)
    assert current is not None and current.submission_num == 1
    stale = [
        news((1, 0, 0), S.RUNNING, at=T0 + 3),
        finished((1, 0, 0), R.EXECUTOR_ERROR, at=T0 + 3),
    ]
    for update in stale:
        assert update_events(m.state, update) == []
    s = step(m, *stale, at=T0 + 3)
    assert s.events == [] and s.effects == [] and s.machine.state == m.state
    assert (1, 0, 0) in m.unheard and (1, 0, 0) not in s.machine.unheard


def test_update_events_turns_news_into_job_status_or_job_finish() -> None:
    """docs/runs.md "One step" 1: a finished job becomes `job-finish`, another new status `job-status`,
    SUBMITTED or an unchanged status nothing."""
    state = submit_run(run_input("task"), T0).machine.state
    assert update_events(state, news((0, 0, 0), S.SUBMITTED)) == []
    assert update_events(state, news((0, 0, 0), S.PULLING)) == [
        ("job-status", {"replica": 0, "job": 0, "submission": 0, "status": S.PULLING, "reason": None})
    ]
    assert update_events(state, news((0, 0, 0), S.TERMINATING, R.EXECUTOR_ERROR)) == [
        (
            "job-status",
            {"replica": 0, "job": 0, "submission": 0, "status": S.TERMINATING, "reason": R.EXECUTOR_ERROR},
        )
    ]
    no_capacity = finished((0, 0, 0), R.FAILED_TO_START_DUE_TO_NO_CAPACITY, instance=None)
    assert update_events(state, no_capacity) == [
        (
            "job-finish",
            {"replica": 0, "job": 0, "submission": 0, "status": S.FAILED}
            | {"reason": R.FAILED_TO_START_DUE_TO_NO_CAPACITY, "exit_status": None, "provisioned": False},
        )
    ]
    # A job the run never submitted.
    assert update_events(state, news((0, 1, 0), S.RUNNING)) == []


# --- stronger_stop and the carry ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "requested", "expected"),
    [
        (None, StopKind.STOP, StopKind.STOP),
        (None, StopKind.ABORT, StopKind.ABORT),
        (StopKind.STOP, StopKind.STOP, StopKind.STOP),
        (StopKind.STOP, StopKind.ABORT, StopKind.ABORT),
        (StopKind.ABORT, StopKind.STOP, StopKind.ABORT),
        (StopKind.ABORT, StopKind.ABORT, StopKind.ABORT),
    ],
)
def test_stronger_stop_lets_a_later_abort_override_a_stop_but_never_the_reverse(
    current: StopKind | None, requested: StopKind, expected: StopKind
) -> None:
    """docs/runs.md STEP 4: a later abort overrides an earlier stop."""
    assert stronger_stop(current, requested) == expected


def _machines_along_a_run() -> list[RunMachine]:
    inp = run_input("service", replicas=2, retry={"on_events": ["error", "no-capacity"], "duration": "10m"})
    machines = [submit_run(inp, T0).machine]
    machines.append(running(machines[-1], (0, 0, 0), (1, 0, 0)))
    machines.append(step(machines[-1], at=T0 + 2, priorities=(4,)).machine)
    machines.append(
        step(machines[-1], finished((1, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 3), at=T0 + 3).machine
    )
    machines.append(
        step(
            machines[-1],
            finished((0, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 4),
            finished((1, 0, 1), R.FAILED_TO_START_DUE_TO_NO_CAPACITY, instance=None, at=T0 + 4),
            at=T0 + 4,
        ).machine
    )
    assert machines[-1].retry_at is not None
    machines.append(step(machines[-1], at=machines[-1].retry_at).machine)
    machines.append(step(machines[-1], at=T0 + 100, stop=StopKind.STOP).machine)
    machines.append(step(machines[-1], at=T0 + 101, stop=StopKind.ABORT).machine)
    return machines


def test_the_machine_round_trips_through_json_as_the_continue_as_new_carry() -> None:
    """docs/runs.md "One step": RunWorkflow continues as new with the machine, so JSON must keep all of it."""
    machines = _machines_along_a_run()
    seen = {(m.state.status, m.retry_at is not None, bool(m.told), m.stop) for m in machines}
    assert (RS.PENDING, True, False, None) in seen and (RS.TERMINATING, False, True, StopKind.ABORT) in seen
    for m in machines:
        again = RunMachine.model_validate_json(m.model_dump_json())
        assert again == m
        assert (again.wake_at, again.done, again.unheard, again.told) == (
            m.wake_at,
            m.done,
            m.unheard,
            m.told,
        )


def test_a_step_after_the_json_round_trip_decides_the_same() -> None:
    """docs/runs.md "One step": the carry decides as the machine did (told, unheard, retry_at kept)."""
    for m in _machines_along_a_run():
        again = RunMachine.model_validate_json(m.model_dump_json())
        for inbox in (Inbox(stop=m.stop), Inbox(stop=StopKind.ABORT), Inbox(stop=m.stop, priorities=[2])):
            assert advance(again, inbox, T0 + 50) == advance(m, inbox, T0 + 50)


# --- the whole lifecycle, at random ------------------------------------------------------------------

MOVES = ("provisioning", "running", "terminating", "finish", "obey")
OWN_REASONS = (
    R.DONE_BY_RUNNER,
    R.CONTAINER_EXITED_WITH_ERROR,
    R.INSTANCE_UNREACHABLE,
    R.FAILED_TO_START_DUE_TO_NO_CAPACITY,
    R.EXECUTOR_ERROR,
    R.MAX_DURATION_EXCEEDED,
)
RANK = {S.SUBMITTED: 0, S.PROVISIONING: 1, S.PULLING: 2, S.RUNNING: 3, S.TERMINATING: 4}

news_items = st.tuples(st.integers(0, 8), st.sampled_from(MOVES), st.sampled_from(OWN_REASONS))
steps = st.lists(
    st.tuples(
        st.lists(news_items, max_size=4),
        st.sampled_from([None] * 8 + [StopKind.STOP, StopKind.ABORT]),  # a stop ends the story: rarely
        st.none() | st.integers(0, 100),
        st.sampled_from([0.0, 1.0, 7.0, 15.0, 31.0, 200.0, 4000.0]),
    ),
    max_size=20,
)


class Jobs:
    """The job submissions the run started, behaving as JobWorkflows do: statuses only forward, a
    TERMINATING reason kept to the end, a termination request obeyed (or not) in their own time."""

    def __init__(self) -> None:
        self.live: dict[Key, tuple[JobStatus, JobTerminationReason | None]] = {}
        self.asked: dict[Key, JobTerminationReason] = {}
        self.finished: set[Key] = set()

    def started(self, key: Key) -> None:
        assert key not in self.live and key not in self.finished, f"{key} started twice"
        self.live[key] = (S.SUBMITTED, None)

    def told(self, effect: TerminateJob) -> None:
        key = (effect.replica_num, effect.job_num, effect.submission_num)
        self.asked.setdefault(key, effect.reason)

    def move(self, index: int, move: str, own: JobTerminationReason, at: float) -> JobUpdate | None:
        if not self.live:
            return None
        key = sorted(self.live)[index % len(self.live)]
        status, reason = self.live[key]
        asked = self.asked.get(key)
        if move in ("provisioning", "running"):
            new = S.PROVISIONING if move == "provisioning" else S.RUNNING
            if status == S.TERMINATING or RANK[new] <= RANK[status]:
                return None
            self.live[key] = (new, None)
            return news(key, new, at=at)
        if move == "obey":
            if asked is None:
                return None
            own = asked
            move = "terminating" if status != S.TERMINATING else "finish"
        if move == "terminating":
            if status == S.TERMINATING:
                return None
            self.live[key] = (S.TERMINATING, own)
            return news(key, S.TERMINATING, own, at=at)
        final = reason if reason is not None else own
        del self.live[key]
        self.finished.add(key)
        return finished(key, final, at=at, instance=None if status == S.SUBMITTED else "host-0")


@settings(max_examples=150, deadline=None)
@given(replicas=st.integers(1, 3), plan=steps)
def test_random_news_keeps_the_machine_equal_to_the_replay_of_its_events(
    replicas: int,
    plan: list[tuple[list[tuple[int, str, JobTerminationReason]], StopKind | None, int | None, float]],
) -> None:
    """docs/runs.md "One step" and "The run's eventlog": for any sequence of a service's job news, stops
    and priorities, the events of every step replay to the machine's state; each job is told to terminate
    at most once per abort value and only while the run has not heard it finish; `unheard` is what was
    started and has not finished; a finished run logs and sends nothing more."""
    inp = run_input("service", replicas=replicas, retry=True)
    first = submit_run(inp, T0)
    machine, log, now = first.machine, list(first.events), T0
    jobs = Jobs()
    for effect in first.effects:
        assert isinstance(effect, StartJob)
        jobs.started((effect.replica_num, effect.job_num, effect.submission_num))
    told: Counter[tuple[int, int, int, bool]] = Counter()
    stop: StopKind | None = None
    for items, stop_asked, priority, dt in plan:
        now += dt
        updates = [u for u in (jobs.move(i, m, r, now) for i, m, r in items) if u is not None]
        if stop_asked is not None:
            stop = stronger_stop(stop, stop_asked)
        was_finished = machine.finished
        inbox = Inbox(updates=updates, stop=stop, priorities=[] if priority is None else [priority])
        s = advance(machine, inbox, now)
        machine = RunMachine.model_validate_json(s.machine.model_dump_json())  # the carry, every step
        assert machine == s.machine
        log += s.events

        assert replay_run(log) == machine.state
        submitted = [
            (e.context["replica"], e.context["job"], e.context["submission"])
            for e in s.events
            if e.name == "job-submit"
        ]
        assert sorted(keys_of(s.effects, StartJob)) == sorted(submitted)
        if was_finished:
            assert s.events == [] and s.effects == []
        for effect in s.effects:
            if isinstance(effect, StartJob):
                jobs.started((effect.replica_num, effect.job_num, effect.submission_num))
            elif isinstance(effect, TerminateJob):
                key = (effect.replica_num, effect.job_num, effect.submission_num)
                assert key not in jobs.finished, f"{key} told to terminate after the run heard it finish"
                told[(*key, effect.abort)] += 1
                jobs.told(effect)
        assert all(n == 1 for n in told.values()), told
        assert set(machine.told) <= set(told)
        assert sorted(machine.unheard) == sorted(jobs.live)
        assert len(set(machine.unheard)) == len(machine.unheard)
        assert machine.done == (machine.finished and not jobs.live)
        assert (machine.retry_at is not None) == (machine.state.status == RS.PENDING)
        cleans = [i for i, e in enumerate(log) if e.name == "clean"]
        assert cleans == ([len(log) - 1] if machine.finished else [])
        if machine.finished:
            assert all(j.status.is_finished() for j in machine.state.jobs)
        if stop is not None and not machine.finished:
            assert machine.state.status == RS.TERMINATING
    # What the examples reached (pytest --hypothesis-show-statistics).
    event(f"ended {machine.state.status}")
    backoffs = {e.context["backoff"] for e in log if e.name == "retry"}
    event("in-place retry" if 0 in backoffs else "no in-place retry")
    event("resubmitted after a backoff" if backoffs - {0} else "no backoff resubmission")


def test_an_inbox_without_a_stop_does_not_undo_an_abort() -> None:
    """docs/runs.md STEP 4: a stop never weakens: no stop in the inbox, or a graceful one after an abort,
    leaves the abort in force and tells nobody anything more."""
    m = running(submit_run(run_input("task"), T0).machine, (0, 0, 0))
    aborted = step(m, at=T0 + 5, stop=StopKind.ABORT)
    for later in (step(aborted.machine, at=T0 + 6), step(aborted.machine, at=T0 + 6, stop=StopKind.STOP)):
        assert later.machine.stop == StopKind.ABORT
        assert later.effects == []
