"""A service's replica count as pure steps (docs/services.md#autoscaling): `advance` given the load watch's
answers scales up, down (SCALED_DOWN jobs stop counting) and to zero (PENDING until woken)."""

from __future__ import annotations

from core.runs.effects import StartJob, TerminateJob
from core.runs.lifecycle import Inbox, advance, plan_of, submit_run
from core.runs.machine import RunMachine, Step
from core.status import JobStatus, JobTerminationReason, RunStatus
from core.wire.services import LoadChange, ScalingRule
from tests.core.test_run_lifecycle import T0, finished, keys_of, news, run_input, running, said

S = JobStatus
SCALED = {"replicas": "0..3", "scaling": {"target": 10, "scale_up_delay": 30, "scale_down_delay": 60}}


def load(machine: RunMachine, desired: int, rps: float, at: float) -> Step:
    return advance(machine, Inbox(loads=[LoadChange(desired=desired, rps=rps)]), at)


def test_plan_of_a_service_with_a_range_has_its_scaling_rule() -> None:
    plan = plan_of(run_input("service", **SCALED))
    assert plan.scaling == ScalingRule(
        min_replicas=0, max_replicas=3, target=10, window=60, scale_up_delay=30, scale_down_delay=60
    )
    assert plan.replicas == 1  # a range from zero starts with one replica
    assert plan_of(run_input("service", replicas=2)).scaling is None


def test_scale_up_submits_new_replicas_and_logs_the_count() -> None:
    machine = running(submit_run(run_input("service", **SCALED), T0).machine, (0, 0, 0))
    step = load(machine, 3, 25.0, T0 + 40)
    assert said(step.events)[0] == ("scale", {"replicas": 3, "rps": 25.0})
    assert keys_of(step.effects, StartJob) == [(1, 0, 0), (2, 0, 0)]
    assert step.machine.state.replicas == 3 and step.machine.state.scaled_at == T0 + 40


def test_scale_down_stops_the_newest_replicas_even_those_not_yet_running() -> None:
    machine = running(submit_run(run_input("service", **SCALED), T0).machine, (0, 0, 0))
    machine = load(machine, 3, 25.0, T0 + 40).machine
    machine = advance(machine, Inbox(updates=[news((1, 0, 0), S.RUNNING, at=T0 + 41)]), T0 + 41).machine
    step = load(machine, 1, 4.0, T0 + 120)
    stops = [e for e in step.effects if isinstance(e, TerminateJob)]
    assert [(e.replica_num, e.reason) for e in stops] == [
        (2, JobTerminationReason.SCALED_DOWN),
        (1, JobTerminationReason.SCALED_DOWN),
    ]
    assert keys_of(step.effects, StartJob) == []
    # Their ends change nothing of the run's status: SCALED_DOWN jobs do not count.
    ends = [finished((r, 0, 0), JobTerminationReason.SCALED_DOWN, at=T0 + 121) for r in (1, 2)]
    after = advance(step.machine, Inbox(updates=ends), T0 + 121)
    assert after.machine.state.status == RunStatus.RUNNING


def test_scaled_to_zero_the_run_is_pending_without_a_backoff_and_a_request_wakes_it() -> None:
    machine = running(submit_run(run_input("service", **SCALED), T0).machine, (0, 0, 0))
    step = load(machine, 0, 0.0, T0 + 100)
    assert keys_of(step.effects, TerminateJob) == [(0, 0, 0)]
    end = finished((0, 0, 0), JobTerminationReason.SCALED_DOWN, at=T0 + 101)
    pending = advance(step.machine, Inbox(updates=[end]), T0 + 101).machine
    assert pending.state.status == RunStatus.PENDING and pending.wake_at is None
    woken = load(pending, 1, 0.02, T0 + 500)
    assert keys_of(woken.effects, StartJob) == [(0, 0, 1)]  # replica 0 again, its next submission
    assert ("status", {"status": RunStatus.SUBMITTED}) in said(woken.events)
    assert woken.machine.state.status == RunStatus.SUBMITTED


def test_a_load_change_after_a_stop_changes_nothing() -> None:
    machine = running(submit_run(run_input("service", **SCALED), T0).machine, (0, 0, 0))
    from core.runs.machine import StopKind

    stopped = advance(machine, Inbox(stop=StopKind.STOP), T0 + 5).machine
    step = load(stopped, 3, 30.0, T0 + 50)
    assert keys_of(step.effects, StartJob) == [] and "scale" not in [e.name for e in step.events]
