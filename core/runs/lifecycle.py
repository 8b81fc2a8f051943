"""The run's state machine as one pure step: `submit_run` (STEP 1) and `advance` (every step after).

RunWorkflow keeps its message handlers, its wait, the effects' execution, the store flush and
continue-as-new; every decision is here and in the phase modules (docs/runs.md):

- STEP 1 `submit_run`: the run is logged, and every replica gets its first submission.
- each later step, `advance(machine, inbox, now)`: the jobs' news is folded in; then, in this order, a stop
  from the user (`terminating.begin_stop`), a pending backoff that is over (`pending.resubmit_all`), or
  the status derivation of an active run (`active.decide`); a TERMINATING run then tells its jobs and
  finishes once they all have (`terminating.terminate_and_clean`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.configuration import ServiceConfiguration, TaskConfiguration
from core.configuration.replica_groups import ServiceGroup
from core.eventlog import Event
from core.run_types import configurator_for
from core.runs import active, cycles, dependencies, deploying, pending, scaling, startup, terminating
from core.runs.effects import SetQueuedPriority
from core.runs.machine import GroupPlan, RunMachine, RunPlan, Step, StepBuilder, StopKind, stronger_stop
from core.runs.state_machine import RunState, apply_run_event
from core.runs.submissions import waiting_requests
from core.runs.workflow_messages import RunInput
from core.status import JobStatus
from core.wire.job_messages import JobUpdate
from core.wire.run_messages import CycleTrigger, RunNews
from core.wire.services import LoadChange, ScalingRule

EventSpec = tuple[str, dict[str, Any]]


class Inbox(BaseModel):
    """What reached the run since its last step."""

    model_config = ConfigDict(frozen=True)

    updates: list[JobUpdate] = Field(default_factory=list)  # the jobs' news, in the order it arrived
    stop: StopKind | None = None  # the stop asked for so far (None: nothing new)
    stop_by: str | None = None  # who asked for it last (docs/teams.md#who-did-it)
    priorities: list[int] = Field(default_factory=list)  # `ferry set-priority`, in order
    loads: list[LoadChange] = Field(default_factory=list)  # the load watches want other replica counts
    deploy: deploying.Deploy | None = None  # the configuration re-applied in place (a service, a schedule)
    triggers: list[CycleTrigger] = Field(default_factory=list)  # a scheduled run's schedule fired
    news: list[RunNews] = Field(default_factory=list)  # runs this one waits for changed status


def plan_of(inp: RunInput) -> RunPlan:
    conf = inp.configuration
    run_type = configurator_for(conf)
    groups: tuple[GroupPlan, ...] = ()
    if isinstance(conf, ServiceConfiguration) and isinstance(conf.replicas, list):
        groups = tuple(
            GroupPlan(name=group.name or "", replicas=group.starting_count, scaling=scaling_rule(group))
            for group in conf.groups
        )
    array = conf.array if isinstance(conf, TaskConfiguration) else None
    starting = run_type.replica_count() if array is None else array.parallel()
    return RunPlan(
        run_id=inp.run_id,
        replicas=sum(group.replicas for group in groups) if groups else starting,
        nodes=run_type.nodes_per_replica(),
        stop_criteria=conf.stop_criteria.value,
        retry=conf.retry,
        submitted_at=inp.submitted_at,
        scaling=scaling_rule(conf.groups[0])
        if isinstance(conf, ServiceConfiguration) and not groups
        else None,
        groups=groups,
        schedule=tuple(conf.schedule.cron) if conf.schedule is not None else (),
        dependencies=tuple(inp.dependencies),
        startup_order=conf.startup_order.value,
        array=0 if array is None else array.count,
        max_parallel=0 if array is None else array.parallel(),
    )


def scaling_rule(group: ServiceGroup) -> ScalingRule | None:
    """A replica group's autoscaling rule, when its `replicas` is a range (which then needs `scaling`)."""
    if group.scaling is None:
        return None
    return ScalingRule(
        min_replicas=group.replicas.min,
        max_replicas=group.replicas.max,
        target=group.scaling.target,
        window=group.scaling.window,
        scale_up_delay=group.scaling.scale_up_delay,
        scale_down_delay=group.scaling.scale_down_delay,
    )


def submit_run(
    inp: RunInput, now: float, *, retry_window_restarts: bool = False, elements_at_once: bool = False
) -> Step:
    """STEP 1: the run's first event, and the first submission of every job. `retry_window_restarts`: a
    run begun without the patch `retry-window` (`RunMachine.retry_window_restarts`). `elements_at_once`:
    an array's elements all submitted now, their ElementsWorkflow keeping `max_parallel` (docs/runs.md)."""
    conf = inp.configuration
    submit = Event(
        timestamp=now,
        name="submit",
        context={"run_name": inp.run_name, "project": inp.project, "user": inp.user, "type": conf.type},
    )
    plan = plan_of(inp)
    if elements_at_once:
        plan = plan.model_copy(update={"replicas": plan.array, "max_parallel": plan.array})
    machine = RunMachine(
        plan=plan,
        state=apply_run_event(None, submit),
        retry_window_restarts=retry_window_restarts,
    )
    b = StepBuilder(machine, now)
    if cycles.is_scheduled(b):
        cycles.wait(b)  # STEP 1 of a scheduled run: PENDING until its schedule fires
    elif dependencies.has_dependencies(b):
        dependencies.wait(b)  # PENDING until the runs it waits for are where it needs them
    else:
        b.submit_all()
    if terminating.applies(b):
        terminating.terminate_and_clean(b)  # a run waiting for a run that does not exist ends at once
    step = b.step()
    return step.model_copy(update={"events": [submit, *step.events]})


def advance(machine: RunMachine, inbox: Inbox, now: float) -> Step:
    """One step of an active run's lifecycle (a finished one only hears its jobs' last words)."""
    b = StepBuilder(machine, now)
    if inbox.stop is not None:
        b.stop = stronger_stop(machine.stop, inbox.stop)  # a stop never weakens
        b.stop_by = inbox.stop_by
    for update in inbox.updates:
        _hear(b, update)
    if b.state.status.is_finished():
        return b.step()
    for priority in inbox.priorities:
        _set_priority(b, priority)
    if terminating.stop_pending(b):
        terminating.begin_stop(b)
    else:
        if inbox.deploy is not None and cycles.is_scheduled(b):
            # Before the triggers: a cycle that starts in this step runs the new configuration.
            if cycles.between_cycles(b.state):
                cycles.reconfigure(b, inbox.deploy)
        elif inbox.deploy is not None and b.state.status in scaling.SCALES_IN:
            deploying.begin(b, inbox.deploy)
        for trigger in inbox.triggers:
            cycles.begin(b, trigger)
        for news in inbox.news:
            dependencies.hear(b, news)
        for load in inbox.loads:
            if scaling.applies(b, load.group):
                scaling.rescale(b, load.desired, load.rps, load.group)
        if pending.retry_due(b):
            pending.resubmit_all(b)
        elif active.applies(b):
            active.decide(b)
        if deploying.applies(b):
            deploying.roll(b)
    if terminating.applies(b):
        terminating.terminate_and_clean(b)
    return b.step()


def _hear(b: StepBuilder, update: JobUpdate) -> None:
    key = (update.replica_num, update.job_num, update.submission_num)
    if update.status.is_finished():
        b.heard_last_word(key)
    if b.state.status.is_finished():
        return
    was_started = startup.started(b.state, update.replica_num, update.job_num)
    for name, context in update_events(b.state, update):
        b.log(name, **context)
    if not was_started and startup.started(b.state, update.replica_num, update.job_num):
        # The jobs that waited for this one (`startup_order`) may start once all theirs have.
        for release in startup.releases(
            b.plan.startup_order, b.state, update.replica_num, update.job_num, b.plan.nodes
        ):
            b.effect(release)


def _set_priority(b: StepBuilder, priority: int) -> None:
    """`ferry set-priority`: logged, and the replicas still waiting move in the fleet's queue."""
    b.log("priority", priority=priority)
    requests = waiting_requests(b.plan.run_id, b.state)
    if requests:
        b.effect(SetQueuedPriority(request_ids=requests, priority=priority))


def update_events(state: RunState, update: JobUpdate) -> list[EventSpec]:
    """What a job's news becomes in its run's eventlog: its finish, or its new status (SUBMITTED says
    nothing new); news of an older submission of a resubmitted replica no longer counts."""
    current = state.job(update.replica_num, update.job_num)
    if current is None or current.submission_num != update.submission_num:
        return []
    if current.status.is_finished():  # its last word heard again (an array's news sent twice): no news
        return []
    ctx: dict[str, Any] = {"replica": update.replica_num, "job": update.job_num}
    ctx["submission"] = update.submission_num
    if update.status.is_finished():
        finish = dict(
            status=update.status,
            reason=update.termination_reason,
            exit_status=update.exit_status,
            provisioned=update.instance is not None,
        )
        return [("job-finish", {**ctx, **finish})]
    events: list[EventSpec] = []
    if update.status != current.status and update.status != JobStatus.SUBMITTED:
        reason = update.termination_reason if update.status == JobStatus.TERMINATING else None
        events.append(("job-status", {**ctx, "status": update.status, "reason": reason}))
    if update.serving is not None and update.serving != current.serving:
        events.append(("job-serving", {**ctx, "state": update.serving}))
    return events
