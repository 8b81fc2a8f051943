"""The run's lifecycle state beyond its eventlog, and the builder every phase writes one step with.

`RunMachine` is all that a run's decisions read: its plan (what the configuration fixes), its eventlog's
state (`core.runs.state_machine.RunState`), the stop asked for, the pending backoff's end, which jobs were
told to terminate and which have not said their last word. It is frozen, and it is what RunWorkflow
continues as new with. `StepBuilder` logs events (each folded into the state at once, so a later rule of
the same step sees it) and collects effects; the phase modules (`active`, `pending`, `terminating`) use it.
See docs/runs.md.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from core.configuration.retry import RetryPolicy
from core.eventlog import Event
from core.runs.derivation import jobs_to_stop
from core.runs.effects import Effect, StartJob, TerminateJob
from core.runs.state_machine import RunState, apply_run_event
from core.status import JobTerminationReason
from core.wire.run_messages import DependencyTarget
from core.wire.services import ScalingRule

JobKey = tuple[int, int, int]  # (replica, job, submission)

# The sibling jobs of a replica that is resubmitted end by the server's hand.
SIBLING_REASON = JobTerminationReason.TERMINATED_BY_SERVER


def new_event(now: float, name: str, **context: Any) -> Event:
    """An event of a run's log; a context value None is left out (an optional key not given)."""
    return Event(timestamp=now, name=name, context={k: v for k, v in context.items() if v is not None})


class StopKind(StrEnum):
    STOP = "stop"  # graceful: the jobs get their stop_duration
    ABORT = "abort"  # at once


def stronger_stop(current: StopKind | None, requested: StopKind) -> StopKind:
    """A later abort overrides an earlier stop; a stop after an abort changes nothing."""
    return StopKind.ABORT if StopKind.ABORT in (current, requested) else StopKind.STOP


class GroupPlan(BaseModel):
    """One replica group of a service (docs/services.md#replica-groups)."""

    model_config = ConfigDict(frozen=True)

    name: str
    replicas: int  # replicas the group starts with
    scaling: ScalingRule | None = None


class RunPlan(BaseModel):
    """What a run's configuration and submission fix for its whole life."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    replicas: int  # replicas the run starts with
    nodes: int  # jobs per replica
    stop_criteria: Literal["all-done", "master-done"]
    retry: RetryPolicy | None = None
    submitted_at: float  # when the run's current cycle began: no retry clock starts before it
    scaling: ScalingRule | None = None  # a service whose replica count follows its load
    groups: tuple[GroupPlan, ...] = ()  # a service's replica groups; () for the single form
    schedule: tuple[str, ...] = ()  # a scheduled run's cron expressions (UTC); () for any other run
    dependencies: tuple[DependencyTarget, ...] = ()  # the runs it waits for (docs/dependencies.md)
    startup_order: str = "any"  # which nodes of a replica wait for others (core.runs.startup)
    # An array task (core.runs.arrays): its elements (replicas 0..array-1, `replicas` of them started at
    # first) and how many may be active at once; 0 for any other run.
    array: int = 0
    max_parallel: int = 0

    def replica_groups(self) -> tuple[GroupPlan | None, ...]:
        """The groups a run keeps replicas of: (None,) for a run without groups (one homogeneous set of
        `replicas`, scaled by `scaling`)."""
        return self.groups or (None,)

    def group(self, name: str | None) -> GroupPlan | None:
        return next((group for group in self.groups if group.name == name), None)

    def starting_count(self, group: str | None) -> int:
        """The replicas `group` starts with (None: the run's, without groups)."""
        plan = self.group(group)
        return self.replicas if plan is None else plan.replicas

    def scaling_rule(self, group: str | None) -> ScalingRule | None:
        if group is None:
            return self.scaling
        plan = self.group(group)
        return None if plan is None else plan.scaling


class RunMachine(BaseModel):
    model_config = ConfigDict(frozen=True)

    plan: RunPlan
    state: RunState
    stop: StopKind | None = None  # as of the last step
    retry_at: float | None = None  # a PENDING run's resubmission time (a durable timer in the workflow)
    told: tuple[tuple[int, int, int, bool], ...] = ()  # (replica, job, submission, abort) terminations sent
    unheard: tuple[JobKey, ...] = ()  # submissions started whose last word has not come yet
    # A run begun before the patch `retry-window` (RunWorkflow reads it): each failure of a job after it
    # held an instance opens a new retry window, as then (core.runs.retry.restarting_window_start).
    # False, a run begun since: its retries count in the window of its first failure.
    retry_window_restarts: bool = False

    @property
    def finished(self) -> bool:
        return self.state.status.is_finished()

    @property
    def done(self) -> bool:
        """Finished, and every job's last word heard: the run stores them, so it waits for them."""
        return self.finished and not self.unheard

    @property
    def wake_at(self) -> float | None:
        return self.retry_at


class Step(BaseModel):
    """One step's outcome: the machine after it, the events it logged (in order), what to carry out."""

    model_config = ConfigDict(frozen=True)

    machine: RunMachine
    events: list[Event]
    effects: list[Effect]


def actor(by: str | None) -> dict[str, str]:
    """An event's `by`: who asked for what it records, where a person did (docs/teams.md#who-did-it)."""
    return {} if by is None else {"by": by}


class StepBuilder:
    """Accumulates one step. Not a model: it lives only while `advance` runs."""

    def __init__(self, machine: RunMachine, now: float) -> None:
        self.now = now
        self.plan = machine.plan
        self.state = machine.state
        self.stop = machine.stop
        self.stop_by: str | None = None  # who asked for the stop this step hears (the inbox's)
        self.retry_at = machine.retry_at
        self.retry_window_restarts = machine.retry_window_restarts
        self._told = list(machine.told)
        self._unheard = list(machine.unheard)
        self._events: list[Event] = []
        self._effects: list[Effect] = []

    def log(self, name: str, **context: Any) -> None:
        event = new_event(self.now, name, **context)
        self.state = apply_run_event(self.state, event)
        self._events.append(event)

    def heard_last_word(self, key: JobKey) -> None:
        if key in self._unheard:
            self._unheard.remove(key)

    def submit_all(self) -> None:
        """Every replica's first submission (of a cycle, for a scheduled run): numbered from 0, group by
        group, each group its starting count."""
        replica = 0
        for group in self.plan.replica_groups():
            for _ in range(self.plan.starting_count(None if group is None else group.name)):
                self.submit_replica(replica, None if group is None else group.name)
                replica += 1

    def submit_replica(self, replica: int, group: str | None = None) -> None:
        """A new submission of every job of a replica (in `group`, else in its earlier submission's);
        started node 0 last, since it enqueues the replica and the fleet may place it at once, so every
        node must be there."""
        new = []
        for job in range(self.plan.nodes):
            current = self.state.job(replica, job)
            submission = 0 if current is None else current.submission_num + 1
            in_group = group if group is not None or current is None else current.group
            deployment = self.state.deployment or None  # said only once the run has been re-applied
            self.log(
                "job-submit",
                replica=replica,
                job=job,
                submission=submission,
                deployment=deployment,
                group=in_group,
            )
            new.append((replica, job, submission))
        for key in reversed(new):
            self._effects.append(StartJob(replica_num=key[0], job_num=key[1], submission_num=key[2]))
            self._unheard.append(key)

    def stop_replica(self, replica: int) -> None:
        """Terminate the still-running jobs of a replica about to be resubmitted (docs/runs.md, STEP 2)."""
        for job in jobs_to_stop(self.state.job_views(), [replica]):
            self._effects.append(
                TerminateJob(
                    replica_num=job.replica_num,
                    job_num=job.job_num,
                    submission_num=job.submission_num,
                    reason=SIBLING_REASON,
                    message="its replica is resubmitted",
                )
            )

    def told_keys(self) -> set[JobKey]:
        """The jobs told to terminate so far, with or without a grace period."""
        return {(replica, job, submission) for replica, job, submission, _ in self._told}

    def tell_once(self, key: JobKey, reason: JobTerminationReason, abort: bool) -> None:
        """Tell a job to terminate for the run's reason, once per (job, abort)."""
        told = (*key, abort)
        if told in self._told:
            return
        self._told.append(told)
        self._effects.append(
            TerminateJob(
                replica_num=key[0], job_num=key[1], submission_num=key[2], reason=reason, abort=abort
            )
        )

    def effect(self, effect: Effect) -> None:
        self._effects.append(effect)

    def step(self) -> Step:
        machine = RunMachine(
            plan=self.plan,
            state=self.state,
            stop=self.stop,
            retry_at=self.retry_at,
            told=tuple(self._told),
            unheard=tuple(self._unheard),
            retry_window_restarts=self.retry_window_restarts,
        )
        return Step(machine=machine, events=self._events, effects=self._effects)
