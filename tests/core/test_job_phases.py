"""What a JobWorkflow remembers beyond its eventlog (`core.jobs.phases`, docs/jobs.md), without Temporal:
the fleet's answer, the run's stop requests, the phase, and the grace period of a stop."""

from __future__ import annotations

from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from core.jobs.phases import JobControl, JobPhase, PlacementOutcome, grace_seconds
from core.status import JobTerminationReason
from core.wire.agent_api import ClusterInfo
from core.wire.job_messages import Placement, TerminateJobRequest
from core.wire.messages import JobOutcome

R = JobTerminationReason
LOST = R.INSTANCE_UNREACHABLE


def placement(instance: str = "host-a") -> Placement:
    return Placement(instance_name=instance, cluster=ClusterInfo())


def stop(
    reason: R = R.TERMINATED_BY_USER, *, abort: bool = False, message: str | None = None
) -> TerminateJobRequest:
    return TerminateJobRequest(reason=reason, abort=abort, message=message)


# --- on_terminate ------------------------------------------------------------------------------------


def test_terminate_first_reason_wins() -> None:
    """The first request's reason is kept; a later graceful request changes nothing."""
    first = stop(R.SCALED_DOWN, message="scaled")
    control = JobControl().on_terminate(first).on_terminate(stop(R.TERMINATED_BY_USER, message="later"))
    assert control.terminate == first
    assert not control.lost


def test_terminate_later_abort_upgrades_abort_but_keeps_the_first_reason() -> None:
    """A later abort shortens the grace period (abort becomes true) but the first reason stays."""
    control = JobControl().on_terminate(stop(R.SCALED_DOWN)).on_terminate(stop(R.ABORTED_BY_USER, abort=True))
    assert control.terminate is not None
    assert control.terminate.abort
    assert control.terminate.reason == R.SCALED_DOWN


def test_terminate_later_graceful_request_after_an_abort_changes_nothing() -> None:
    """Once an abort is remembered, a later non-abort request neither changes the reason nor undoes it."""
    aborted = JobControl().on_terminate(stop(R.ABORTED_BY_USER, abort=True, message="now"))
    later = aborted.on_terminate(stop(R.TERMINATED_BY_SERVER, message="graceful"))
    assert later.terminate == aborted.terminate
    assert later == aborted


def test_terminate_a_second_abort_changes_nothing() -> None:
    """An abort after an abort keeps the first one whole (reason and message)."""
    first = stop(R.ABORTED_BY_USER, abort=True, message="first")
    control = JobControl().on_terminate(first).on_terminate(stop(R.TERMINATED_BY_SERVER, abort=True))
    assert control.terminate == first


@pytest.mark.parametrize(
    "requests",
    [
        [stop(LOST)],
        [stop(LOST, abort=True)],
        [stop(R.TERMINATED_BY_USER), stop(LOST)],
        [stop(R.ABORTED_BY_USER, abort=True), stop(LOST)],
        [stop(LOST), stop(R.TERMINATED_BY_USER)],
        [stop(LOST), stop(R.ABORTED_BY_USER, abort=True)],
        [stop(R.SCALED_DOWN), stop(LOST, abort=True), stop(R.TERMINATED_BY_USER)],
    ],
    ids=["alone", "alone-abort", "after-stop", "after-abort", "before-stop", "before-abort", "between"],
)
def test_terminate_instance_unreachable_sets_lost_whatever_came_before_and_after(
    requests: list[TerminateJobRequest],
) -> None:
    """A request with reason INSTANCE_UNREACHABLE sets `lost`, and nothing before or after clears it."""
    control = JobControl()
    for request in requests:
        control = control.on_terminate(request)
    assert control.lost
    assert control.terminate is not None
    assert control.terminate.reason == requests[0].reason  # the first reason still wins


def test_terminate_never_mutates() -> None:
    """JobControl is frozen: `on_terminate` returns a new object and leaves the old one as it was."""
    before = JobControl()
    after = before.on_terminate(stop(LOST))
    assert after is not before
    assert before == JobControl()
    assert before.terminate is None and not before.lost
    aborted = after.on_terminate(stop(R.ABORTED_BY_USER, abort=True))
    assert after.terminate == stop(LOST)
    assert aborted.terminate is not None and aborted.terminate.abort
    with pytest.raises(ValidationError):
        before.lost = True  # type: ignore[misc]
    with pytest.raises(ValidationError):
        before.terminate = stop()  # type: ignore[misc]


# --- on_placed / on_refused ----------------------------------------------------------------------------


def test_first_placement_wins() -> None:
    """The first grant heard is kept; a later one is ignored (and the same object comes back)."""
    once = JobControl().on_placed(placement("host-a"))
    twice = once.on_placed(placement("host-b"))
    assert twice is once
    assert twice.placement == placement("host-a")
    assert twice.instance == "host-a"
    assert JobControl().instance is None


def test_first_refusal_wins() -> None:
    """The first refusal heard is kept; a later one is ignored."""
    once = JobControl().on_refused("too big")
    twice = once.on_refused("fleet deleted")
    assert twice is once
    assert twice.refused == "too big"


def test_placed_and_refused_never_mutate() -> None:
    """`on_placed`, `on_refused` and `on_queued` return new objects and leave the old one as it was."""
    before = JobControl()
    assert before.on_placed(placement()) is not before
    assert before.on_refused("no") is not before
    assert before.on_queued() is not before
    assert before == JobControl()


# --- placement_outcome ---------------------------------------------------------------------------------


def test_outcome_none_while_nothing_heard() -> None:
    """Nothing heard from the fleet or the run: keep waiting."""
    assert JobControl().placement_outcome() is None


def test_outcome_placed() -> None:
    """A grant is PLACED."""
    assert JobControl().on_placed(placement()).placement_outcome() == PlacementOutcome.PLACED


@pytest.mark.parametrize("stop_first", [True, False], ids=["stop-then-grant", "grant-then-stop"])
def test_outcome_placed_wins_over_a_stop_that_came_with_it(stop_first: bool) -> None:
    """A grant and a stop both heard: PLACED (the clean-up frees the capacity), whichever came first."""
    control = JobControl()
    if stop_first:
        control = control.on_terminate(stop()).on_placed(placement())
    else:
        control = control.on_placed(placement()).on_terminate(stop())
    assert control.placement_outcome() == PlacementOutcome.PLACED


def test_outcome_withdraw_when_stopped_before_placement() -> None:
    """A stop heard before any grant: WITHDRAW, also when queued or refused too."""
    stopped = JobControl().on_terminate(stop())
    assert stopped.placement_outcome() == PlacementOutcome.WITHDRAW
    assert stopped.on_queued().placement_outcome() == PlacementOutcome.WITHDRAW
    assert stopped.on_refused("no").placement_outcome() == PlacementOutcome.WITHDRAW


def test_outcome_refused() -> None:
    """A refusal with no grant and no stop: REFUSED, also when queued before."""
    assert JobControl().on_refused("no").placement_outcome() == PlacementOutcome.REFUSED
    assert JobControl().on_queued().on_refused("no").placement_outcome() == PlacementOutcome.REFUSED


def test_outcome_log_waiting_once() -> None:
    """Queued in phase PLACING: LOG_WAITING; once the job moved to WAITING_FOR_CAPACITY, None, also
    when queued again."""
    queued = JobControl().on_queued()
    assert queued.placement_outcome() == PlacementOutcome.LOG_WAITING
    waiting = queued.with_phase(JobPhase.WAITING_FOR_CAPACITY)
    assert waiting.placement_outcome() is None
    assert waiting.on_queued().placement_outcome() is None


def test_outcome_after_waiting() -> None:
    """While waiting for capacity, a grant is PLACED, a stop WITHDRAW, a refusal REFUSED."""
    waiting = JobControl().on_queued().with_phase(JobPhase.WAITING_FOR_CAPACITY)
    assert waiting.on_placed(placement()).placement_outcome() == PlacementOutcome.PLACED
    assert waiting.on_terminate(stop()).placement_outcome() == PlacementOutcome.WITHDRAW
    assert waiting.on_refused("no").placement_outcome() == PlacementOutcome.REFUSED


def test_with_phase_returns_a_new_object() -> None:
    """`with_phase` changes only the phase, on a copy."""
    before = JobControl().on_queued()
    after = before.with_phase(JobPhase.WAITING_FOR_CAPACITY)
    assert before.phase == JobPhase.PLACING
    assert after.phase == JobPhase.WAITING_FOR_CAPACITY
    assert after.model_copy(update={"phase": JobPhase.PLACING}) == before


# --- must_release --------------------------------------------------------------------------------------


def test_must_release_once_placed() -> None:
    """Granted capacity goes back: true once placed, whatever the phase since."""
    placed = JobControl().on_placed(placement())
    assert placed.must_release()
    for phase in JobPhase:
        assert placed.with_phase(phase).must_release()


def test_must_release_when_withdrawn() -> None:
    """Withdrawn while waiting: a grant may be on its way, so the fleet is told."""
    assert JobControl().on_terminate(stop()).with_phase(JobPhase.WITHDRAWN).must_release()


def test_must_not_release_when_refused_or_never_heard() -> None:
    """Refused, or nothing heard: there is nothing to give back."""
    assert not JobControl().must_release()
    assert not JobControl().on_queued().with_phase(JobPhase.WAITING_FOR_CAPACITY).must_release()
    assert not JobControl().on_refused("no").with_phase(JobPhase.REFUSED).must_release()


# --- stopping ------------------------------------------------------------------------------------------


def test_stop_sent_sets_the_phase() -> None:
    """A graceful stop sent to the agent is STOPPING; an abort is KILLED."""
    assert JobControl().stop_sent(stop()).phase == JobPhase.STOPPING
    assert JobControl().stop_sent(stop(abort=True)).phase == JobPhase.KILLED


def test_abort_requested_after_a_graceful_stop() -> None:
    """After a graceful stop was sent (STOPPING), a later abort makes `abort_requested` true; once the
    abort was sent too (KILLED), it is false again."""
    graceful = stop(R.TERMINATED_BY_USER)
    control = JobControl().on_placed(placement()).with_phase(JobPhase.PLACED).on_terminate(graceful)
    assert not control.abort_requested()
    control = control.stop_sent(graceful)
    assert control.phase == JobPhase.STOPPING
    assert not control.abort_requested()
    control = control.on_terminate(stop(R.ABORTED_BY_USER, abort=True))
    assert control.abort_requested()
    abort = control.terminate
    assert abort is not None and abort.abort and abort.reason == R.TERMINATED_BY_USER
    control = control.stop_sent(abort)
    assert control.phase == JobPhase.KILLED
    assert not control.abort_requested()
    # A further request changes nothing.
    assert not control.on_terminate(stop(R.ABORTED_BY_USER, abort=True)).abort_requested()


def test_abort_requested_false_without_any_request() -> None:
    """No stop asked for: no abort."""
    assert not JobControl().abort_requested()
    assert not JobControl().with_phase(JobPhase.STOPPING).abort_requested()


# --- grace_seconds -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "stop_duration", "expected"),
    [
        (stop(abort=True), 300, 0.0),
        (stop(abort=True), None, 0.0),
        (stop(abort=True), 0, 0.0),
        (stop(), None, 0.0),
        (stop(), 0, 0.0),
        (stop(), 300, 300.0),
        (stop(LOST), 7, 7.0),
    ],
    ids=["abort", "abort-no-duration", "abort-zero", "off", "zero", "duration", "lost-duration"],
)
def test_grace_seconds(request_: TerminateJobRequest, stop_duration: int | None, expected: float) -> None:
    """An abort has no grace period; `stop_duration` None (off) neither; otherwise it is stop_duration."""
    grace = grace_seconds(request_, stop_duration)
    assert grace == expected
    assert isinstance(grace, float)


# --- any order of signals ------------------------------------------------------------------------------

Signal = (
    tuple[Literal["placed"], Placement]
    | tuple[Literal["refused"], str]
    | tuple[Literal["queued"], None]
    | tuple[Literal["terminate"], TerminateJobRequest]
)

signals: st.SearchStrategy[Signal] = st.one_of(
    st.tuples(st.just("placed"), st.builds(placement, st.sampled_from(["host-a", "host-b", "host-c"]))),
    st.tuples(st.just("refused"), st.sampled_from(["too big", "fleet deleted", "another node stopped"])),
    st.tuples(st.just("queued"), st.none()),
    st.tuples(
        st.just("terminate"),
        st.builds(
            TerminateJobRequest,
            reason=st.sampled_from(list(R)),
            abort=st.booleans(),
            message=st.none() | st.sampled_from(["one", "two"]),
        ),
    ),
)


def hear(control: JobControl, signal: Signal) -> JobControl:
    match signal:
        case ("placed", Placement() as grant):
            return control.on_placed(grant)
        case ("refused", str(reason)):
            return control.on_refused(reason)
        case ("queued", None):
            return control.on_queued()
        case ("terminate", TerminateJobRequest() as request):
            return control.on_terminate(request)
    raise AssertionError(signal)


@settings(max_examples=200, deadline=None)
@given(st.lists(signals, max_size=12))
def test_any_sequence_keeps_the_first_answers(sequence: list[Signal]) -> None:
    """For any sequence of the four signals: the first placement, the first refusal and the first
    terminate reason are kept; `abort` is true iff some request aborted; `lost` is true iff some request's
    reason was INSTANCE_UNREACHABLE; the phase is not touched; no earlier state is changed."""
    control = JobControl()
    seen: list[JobControl] = []
    for signal in sequence:
        seen.append(control)
        snapshot = [s.model_copy() for s in seen]
        control = hear(control, signal)
        assert seen == snapshot  # the earlier objects are as they were

    grants = [s[1] for s in sequence if s[0] == "placed"]
    refusals = [s[1] for s in sequence if s[0] == "refused"]
    requests = [s[1] for s in sequence if isinstance(s[1], TerminateJobRequest)]
    assert control.placement == (grants[0] if grants else None)
    assert control.refused == (refusals[0] if refusals else None)
    assert control.queued == any(s[0] == "queued" for s in sequence)
    assert control.lost == any(r.reason == LOST for r in requests)
    assert control.phase == JobPhase.PLACING
    if requests:
        assert control.terminate is not None
        assert control.terminate.reason == requests[0].reason
        assert control.terminate.abort == any(r.abort for r in requests)
    else:
        assert control.terminate is None


@pytest.mark.parametrize(
    ("outcome", "phase"),
    [
        (PlacementOutcome.PLACED, JobPhase.PLACED),
        (PlacementOutcome.WITHDRAW, JobPhase.WITHDRAWN),
        (PlacementOutcome.REFUSED, JobPhase.REFUSED),
        (PlacementOutcome.LOG_WAITING, JobPhase.WAITING_FOR_CAPACITY),
    ],
)
def test_after_moves_to_the_phase_its_outcome_leads_to(outcome: PlacementOutcome, phase: JobPhase) -> None:
    """Each placement outcome has its phase; waiting is logged once, since the next outcome is not it."""
    control = JobControl().on_queued()
    assert control.after(outcome).phase == phase
    assert control.after(PlacementOutcome.LOG_WAITING).placement_outcome() is None


def test_a_job_hears_its_own_tasks_end_first_and_never_another_tasks() -> None:
    """A host may keep another deployment's task whose owner is this job's workflow id (the same project
    and run name; docs/jobs.md#the-instance-watch): its end is not this job's."""
    mine, stale = "train-1a2b3c4d-r0-j0-s0", "train-99ff00aa-r0-j0-s0"
    gone = JobOutcome(termination_reason=JobTerminationReason.EXECUTOR_ERROR, task_id=stale)
    control = JobControl().on_task_ended(gone, mine)
    assert control.ended is None
    done = JobOutcome(termination_reason=JobTerminationReason.DONE_BY_RUNNER, exit_status=0, task_id=mine)
    control = control.on_task_ended(done, mine).on_task_ended(
        done.model_copy(update={"exit_status": 1}), mine
    )
    assert control.ended == done
    # An outcome that names no task (an older worker's watch) is taken, as before.
    unnamed = JobOutcome(termination_reason=JobTerminationReason.DONE_BY_RUNNER, exit_status=0)
    assert JobControl().on_task_ended(unnamed, mine).ended == unnamed
