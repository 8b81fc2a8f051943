"""A rolling deployment as pure steps (docs/services.md#rolling-deployment): what may change in place, and
the roll: one new replica at a time, an old one stopped only once a new one is ready."""

from __future__ import annotations

from core.configuration import ServiceConfiguration
from core.runs.deploying import Deploy, changed_fields, not_in_place
from core.runs.effects import StartJob, TerminateJob
from core.runs.lifecycle import Inbox, advance, plan_of, submit_run
from core.status import JobStatus, JobTerminationReason, RunStatus
from core.wire.job_messages import JobUpdate
from tests.core.test_run_lifecycle import T0, finished, keys_of, news, run_input, running, said

S = JobStatus


def serving(key: tuple[int, int, int], at: float) -> JobUpdate:
    return news(key, S.RUNNING, at=at).model_copy(update={"serving": "ready"})


def configuration(**fields: object) -> ServiceConfiguration:
    conf = run_input("service", **fields).configuration
    assert isinstance(conf, ServiceConfiguration)
    return conf


def test_what_changes_in_place() -> None:
    old = configuration(replicas=2)
    assert changed_fields(old, configuration(replicas=2)) == []
    new = configuration(replicas=3, commands=["serve v2"], env={"V": "2"})
    assert changed_fields(old, new) == ["env", "commands", "replicas"]
    assert not_in_place(old, new) == []
    assert not_in_place(old, configuration(replicas=2, name="other")) == ["name"]
    task = run_input("task").configuration
    assert not_in_place(task, run_input("task", commands=["other"]).configuration) == ["commands"]


def test_a_deployment_records_who_re_applied_it() -> None:
    """docs/teams.md#who-did-it: the API's caller is the `deploy` event's `by`; none where no one is named."""
    machine = running(submit_run(run_input("service", replicas=2), T0).machine, (0, 0, 0), (1, 0, 0))
    inp = run_input("service", replicas=2, commands=["v2"])
    by = advance(machine, Inbox(deploy=Deploy(plan=plan_of(inp), changed=["commands"], by="alice")), T0 + 10)
    assert ("deploy", {"deployment": 1, "changed": ["commands"], "by": "alice"}) in said(by.events)
    anonymous = advance(machine, Inbox(deploy=Deploy(plan=plan_of(inp), changed=["commands"])), T0 + 10)
    assert ("deploy", {"deployment": 1, "changed": ["commands"]}) in said(anonymous.events)


def test_the_roll_step_by_step() -> None:
    machine = running(submit_run(run_input("service", replicas=2), T0).machine, (0, 0, 0), (1, 0, 0))
    inp = run_input("service", replicas=2, commands=["v2"])
    step = advance(machine, Inbox(deploy=Deploy(plan=plan_of(inp), changed=["commands"])), T0 + 10)
    assert keys_of(step.effects, StartJob) == [(2, 0, 0)] and keys_of(step.effects, TerminateJob) == []
    assert ("job-submit", {"replica": 2, "job": 0, "submission": 0, "deployment": 1}) in said(step.events)
    # Running is not enough: only a ready new replica lets an old one go.
    step = advance(step.machine, Inbox(updates=[news((2, 0, 0), S.RUNNING, at=T0 + 11)]), T0 + 11)
    assert step.effects == []
    step = advance(step.machine, Inbox(updates=[serving((2, 0, 0), T0 + 12)]), T0 + 12)
    [stop] = [e for e in step.effects if isinstance(e, TerminateJob)]
    assert (stop.replica_num, stop.reason) == (1, JobTerminationReason.SCALED_DOWN)
    assert ("job-serving", {"replica": 2, "job": 0, "submission": 0, "state": "ready"}) in said(step.events)
    # The old one stopping: the next new one starts (one surge at a time) in the same step as its news.
    step = advance(
        step.machine,
        Inbox(updates=[news((1, 0, 0), S.TERMINATING, JobTerminationReason.SCALED_DOWN, at=T0 + 13)]),
        T0 + 13,
    )
    assert keys_of(step.effects, StartJob) == [(3, 0, 0)]
    step = advance(
        step.machine,
        Inbox(
            updates=[
                finished((1, 0, 0), JobTerminationReason.SCALED_DOWN, at=T0 + 14),
                serving((3, 0, 0), T0 + 14),
            ]
        ),
        T0 + 14,
    )
    assert keys_of(step.effects, TerminateJob) == [(0, 0, 0)]
    end = finished((0, 0, 0), JobTerminationReason.SCALED_DOWN, at=T0 + 15)
    done = advance(step.machine, Inbox(updates=[end]), T0 + 15)
    assert done.effects == [] and done.machine.state.status == RunStatus.RUNNING
    live = [j for j in done.machine.state.jobs if not j.status.is_finished()]
    assert [(j.replica_num, j.deployment) for j in live] == [(2, 1), (3, 1)]
