"""RunWorkflow: one applied configuration, the run lifecycle of docs/runs.md.

Every decision is `core.runs.lifecycle`'s (`submit_run`, then `advance` at each step, on the frozen
`RunMachine` this workflow keeps and continues as new with). This workflow hears its jobs and the user,
waits (a pending backoff is a durable timer), carries out each step's effects — start JobWorkflow children,
signal jobs and the fleet — and stores the run's and its jobs' events (workflows/run_records.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from core.configuration import RunConfiguration
    from core.eventlog import Event
    from core.runs.arrays import max_parallel, share_one_workflow, unheard
    from core.runs.cycles import between_cycles
    from core.runs.deploying import Deploy, changed_fields, not_in_place
    from core.runs.effects import (
        Effect,
        EndCycle,
        PeersStarted,
        StartJob,
        TerminateJob,
        UpdateSchedule,
        WatchRun,
    )
    from core.runs.lifecycle import Inbox, advance, plan_of, submit_run
    from core.runs.machine import RunMachine, Step, StopKind, stronger_stop
    from core.runs.scaling import SCALES_IN
    from core.runs.submissions import job_input
    from core.runs.watching import run_news
    from core.runs.workflow_messages import RunCarry, RunDescription, RunInput
    from core.status import RunStatus
    from core.web_ui import job_details, job_summary, run_line
    from core.wire import revisions
    from core.wire.element_messages import RUN_JOB_UPDATES, JobUpdates
    from core.wire.job_messages import JobUpdate
    from core.wire.run_messages import (
        CycleTrigger,
        DeployReply,
        DeployRequest,
        RunNews,
        RunResult,
        SetPriority,
        StopReply,
        StopRequest,
        WatchRequest,
    )
    from core.wire.workflow_ids import job_workflow_id
    from workflows import patches, run_effects, run_elements, run_schedule
    from workflows.job import JobWorkflow
    from workflows.last_words import LastWords
    from workflows.run_loads import LoadWatches
    from workflows.run_records import RunRecords
    from workflows.run_watchers import DEPENDENCY_NEWS, Watchers, watch_run
    from workflows.web_ui import run_ending, show_run


# A scheduled run takes a re-applied configuration in any active status but TERMINATING by the user (a
# cycle in progress holds it until its end).
_RESCHEDULES_IN = frozenset(s for s in RunStatus if s.is_active())
# Since this patch a job's retries count in the retry window its first failure opened, where each failure
# after the job held an instance opened a new one (docs/runs.md#when-a-job-may-be-retried). Read once, at
# the run's start; the run's machine carries the answer across continue-as-new, for the run's whole life.
RETRY_WINDOW = "retry-window"


@workflow.defn
class RunWorkflow:
    @workflow.init
    def __init__(self, inp: RunInput) -> None:
        self._input = inp
        self._events: list[Event] = []  # this execution's events; earlier ones are in the store
        self._effects: list[Effect] = []  # decided, not carried out
        self._updates: list[JobUpdate] = []
        self._heard: dict[str, int] = {}  # by element: how many of its events it has heard (core.runs.arrays)
        self._priorities: list[int] = []  # `ferry set-priority`, not yet logged
        revised = inp.revision >= revisions.LAST_WORDS  # it takes the patches before, unasked
        self._last_write_local = inp.revision >= revisions.LOCAL_LAST_WRITE  # docs/runs.md#the-store
        self._last_words = LastWords(revised, lambda update: self._updates.append(update))
        self._loads = LoadWatches(inp.run_id)
        self._news: list[RunNews] = []  # from the runs this one waits for (docs/dependencies.md)
        self._watchers = Watchers(inp.run_id, [] if inp.carry is None else inp.carry.watchers)
        self._deploy: Deploy | None = None  # a configuration re-applied in place, not yet logged
        # A scheduled run re-applied during a cycle: its configuration waits for the cycle's end.
        self._next_cycle: tuple[RunConfiguration, list[str], str | None] | None = None
        self._stop_by: str | None = None  # who asked for the stop (an API caller), for its event
        self._triggers: list[CycleTrigger] = []  # a scheduled run's schedule fired (workflows/cycle.py)
        if inp.carry is None:
            # STEP 1 in the constructor: a stop sent with the run's start finds the run already logged.
            restarts = not patches.taken(RETRY_WINDOW, revised)
            now = workflow.now().timestamp()
            step = submit_run(inp, now, retry_window_restarts=restarts)
            # An array's elements share one workflow since this patch (workflows/run_elements.py), which
            # keeps `max_parallel`: the run submits them all at once.
            self._batched = self._shares_one_workflow(step.machine) and workflow.patched(
                run_elements.ARRAY_ELEMENTS
            )
            if self._batched:
                step = submit_run(inp, now, retry_window_restarts=restarts, elements_at_once=True)
            self._machine = step.machine
            self._events = list(step.events)
            self._effects = list(step.effects)
        else:
            self._batched = inp.carry.elements_batched
            self._machine = _carried_machine(inp.carry)
        self._stop = self._machine.stop  # the stop asked for so far; the machine hears it at its next step
        self._records = RunRecords(inp, self._machine.state)
        show_run(self._input, self._machine.state)

    def _shares_one_workflow(self, machine: RunMachine) -> bool:
        if not machine.plan.array:
            return False
        run_id = workflow.info().workflow_id
        return share_one_workflow(job_input(self._input, machine.state, run_id, 0, 0))

    # --- messages ---------------------------------------------------------------------------------

    @workflow.signal
    def job_update(self, update: JobUpdate) -> None:
        self._updates.append(update)

    @workflow.signal(name=RUN_JOB_UPDATES)
    def job_updates(self, news: JobUpdates) -> None:
        """Many jobs' news at once: an array's elements (workflows/elements.py). What was heard already
        is dropped: a redone task of that workflow may send some of it again, in other news."""
        self._updates += unheard(news.updates, self._heard)

    @workflow.signal
    def trigger(self, trigger: CycleTrigger) -> None:
        self._triggers.append(trigger)

    @workflow.signal
    def watch(self, request: WatchRequest) -> None:
        """A run that waits for this one asks to be told its status (docs/dependencies.md)."""
        self._watchers.add(request)

    @workflow.signal(name=DEPENDENCY_NEWS)
    def dependency_news(self, news: RunNews) -> None:
        self._news.append(news)

    @workflow.signal
    def set_priority(self, request: SetPriority) -> None:
        self._priorities.append(request.priority)

    @workflow.update
    def stop(self, request: StopRequest) -> StopReply:
        """Stop (gracefully) or abort the run; a later abort overrides an earlier stop."""
        self._stop = stronger_stop(self._stop, StopKind.ABORT if request.abort else StopKind.STOP)
        self._stop_by = request.by or self._stop_by
        state = self._machine.state
        return StopReply(status=state.status, termination_reason=state.termination_reason)

    @workflow.signal
    def stop_run(self, request: StopRequest) -> None:
        """`stop` as a signal, for a workflow that stops this run (a pipeline stops its running task)."""
        self._stop = stronger_stop(self._stop, StopKind.ABORT if request.abort else StopKind.STOP)

    @workflow.update
    def deploy(self, request: DeployRequest) -> DeployReply:
        """Take a service's changed configuration in place: its new replicas replace the old ones, one at a
        time (core.runs.deploying); refused, with the reason, for what cannot change in place."""
        state = self._machine.state
        scheduled = bool(self._machine.plan.schedule)
        if self._stop is not None or state.status not in (SCALES_IN if not scheduled else _RESCHEDULES_IN):
            return DeployReply(deployment=state.deployment, refused=f"the run is {state.status}")
        old, new = self._input.configuration, request.configuration
        fixed = not_in_place(old, new)
        if fixed:
            return DeployReply(
                deployment=state.deployment, refused=f"cannot change in place: {', '.join(fixed)}"
            )
        changed = changed_fields(old, new)
        if scheduled:
            return self._reschedule(new, changed, request.by)
        if not changed:
            return DeployReply(deployment=state.deployment + (self._deploy is not None))
        if self._deploy is not None:  # two re-applies before the run's next step: one deployment
            changed = [*self._deploy.changed, *(name for name in changed if name not in self._deploy.changed)]
        self._take_configuration(new, changed, request.by)
        return DeployReply(deployment=state.deployment + 1, changed=changed)

    def _reschedule(self, new: RunConfiguration, changed: list[str], by: str | None) -> DeployReply:
        """A scheduled run re-applied: taken now between cycles, else held until the cycle in progress
        ends (docs/schedules.md#changing-a-scheduled-run); the latest re-apply wins."""
        state = self._machine.state
        self._next_cycle = (new, changed, by) if changed else None
        if not changed:
            return DeployReply(deployment=state.deployment + (self._deploy is not None))
        if self._deploy is None:
            self._take_next_cycle()
        after_cycle = state.cycle if self._next_cycle is not None else None
        return DeployReply(deployment=state.deployment + 1, changed=changed, after_cycle=after_cycle)

    def _take_next_cycle(self) -> None:
        """The held configuration of a scheduled run, once it waits for its next trigger."""
        if self._next_cycle is not None and self._deploy is None and between_cycles(self._machine.state):
            self._take_configuration(*self._next_cycle)
            self._next_cycle = None

    def _take_configuration(self, new: RunConfiguration, changed: list[str], by: str | None) -> None:
        """New submissions run `new` from now on; the run logs it (`deploy`) at its next step."""
        self._input = self._input.model_copy(update={"configuration": new})
        self._deploy = Deploy(plan=plan_of(self._input), changed=changed, by=by)

    @workflow.query
    def describe(self) -> RunDescription:
        return RunDescription(
            run_id=self._input.run_id,
            state=self._machine.state,
            events=list(self._events),
            first_seq=self._records.first_seq,
        )

    # --- the lifecycle ----------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        if self._machine.plan.schedule and inp.carry is None:
            await run_schedule.create_schedule(self._input, self._machine.plan.schedule)
        if self._effects:
            # The first events go to the store with the jobs' first news (each job sends some within a
            # second or so): one store write fewer per run. A run with no job started (one waiting for
            # others) has no news coming: its first events go now.
            await self._carry_out()
            if not self._machine.unheard:
                await self._flush()
        elif inp.carry is None:
            await self._flush()
        self._loads.follow(self._machine, self._stop is not None)
        # A finished run still hears its jobs' last words (a stopped sibling's clean-up may end after the
        # run's status is final): it is the one that stores their events.
        while not self._machine.done:
            await self._wait_for_news()
            inbox = Inbox(
                updates=self._updates,
                stop=self._stop,
                stop_by=self._stop_by,
                priorities=self._priorities,
                loads=self._loads.take(),
                deploy=self._deploy,
                triggers=self._triggers,
                news=self._news,
            )
            self._updates, self._priorities, self._deploy, self._triggers, self._news = [], [], None, [], []
            self._records.job_news += [update.record for update in inbox.updates]
            self._take(advance(self._machine, inbox, workflow.now().timestamp()))
            self._take_next_cycle()
            if self._machine.done and self._last_write_local:
                await self._carry_out()  # its last write is its last act, below
            else:
                # In one workflow task: the store write and the new children need not wait for each other.
                await asyncio.gather(self._flush(), self._carry_out())
            await self._watchers.tell(self._run_news())
            self._loads.follow(self._machine, self._stop is not None)
            if self._can_continue_as_new() and self._last_words.awaited:
                await self._last_words.by_signal()
            if self._can_continue_as_new():
                workflow.continue_as_new(self._carry())
        if self._machine.plan.schedule:
            await run_schedule.delete_schedule(self._input)
        # The runs waiting for this one hear its end; one that asks while this runs is told too.
        await self._watchers.tell(self._run_news())
        state = self._machine.state
        result = RunResult(status=state.status, termination_reason=state.termination_reason)
        ending = run_ending(result, run_line(state))  # its patch asked before the last write, if any
        if self._last_write_local:
            await self._flush(last=True)
        if isinstance(ending, ApplicationError):
            raise ending
        return ending

    async def _wait_for_news(self) -> None:
        """Sleep until a job reports, a stop arrives, or a pending backoff ends (a durable timer)."""
        timeout = None
        wake_at = self._machine.wake_at
        if wake_at is not None:
            timeout = timedelta(seconds=max(wake_at - workflow.now().timestamp(), 0))
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: (
                    bool(self._updates)
                    or self._stop != self._machine.stop
                    or bool(self._priorities)
                    or bool(self._loads.changes)
                    or self._deploy is not None
                    or bool(self._triggers)
                    or bool(self._news)
                    or self._watchers.untold(self._run_news())
                ),
                timeout=timeout,
            )

    def _take(self, step: Step) -> None:
        self._machine = step.machine
        self._events += step.events
        self._effects += step.effects
        show_run(self._input, self._machine.state)

    # --- effects ----------------------------------------------------------------------------------

    async def _carry_out(self) -> None:
        """Start the new submissions in the order decided, then send the signals."""
        effects, self._effects = self._effects, []
        signals: list[Any] = []
        elements: list[StartJob] = []  # an array's, to its ElementsWorkflow together
        stops: list[TerminateJob] = []
        for effect in effects:
            if isinstance(effect, StartJob) and self._batched:
                elements.append(effect)
            elif isinstance(effect, StartJob):
                await self._start_job(effect)
            elif isinstance(effect, TerminateJob) and self._batched:
                stops.append(effect)
            elif isinstance(effect, TerminateJob):
                signals.append(run_effects.terminate_job(effect))
            elif isinstance(effect, PeersStarted):
                signals.append(run_effects.tell_peers_started(effect))
            elif isinstance(effect, EndCycle):
                signals.append(run_schedule.end_cycle(effect))
            elif isinstance(effect, WatchRun):
                signals.append(self._watch_run(effect))
            elif isinstance(effect, UpdateSchedule):
                signals.append(run_schedule.update_schedule(self._input, effect))
            else:
                signals.append(run_effects.move_in_queue(self._input.project, self._input.fleet, effect))
        run_id = workflow.info().workflow_id
        if elements:
            state = self._machine.state
            inputs = [job_input(self._input, state, run_id, e.replica_num, e.job_num) for e in elements]
            await run_elements.add(run_id, inputs, max_parallel(self._input.configuration))
        if stops:
            parallel = max_parallel(self._input.configuration)
            signals.append(run_elements.terminate(run_id, self._input.run_id, stops, parallel))
        for signal in signals:
            # A job may finish before the signal reaches it: that is no error, its update is on its way.
            with contextlib.suppress(FailureError):
                await signal

    async def _start_job(self, effect: StartJob) -> None:
        run_id = workflow.info().workflow_id
        inp = job_input(self._input, self._machine.state, run_id, effect.replica_num, effect.job_num)
        job = await workflow.start_child_workflow(
            JobWorkflow.run,
            inp,
            id=job_workflow_id(run_id, effect.replica_num, effect.job_num, effect.submission_num),
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            static_summary=job_summary(inp, self._input.configuration.type),
            static_details=job_details(inp),
        )
        self._last_words.follow(job)

    async def _watch_run(self, effect: WatchRun) -> None:
        news = await watch_run(effect)
        if news is not None:
            self._news.append(news)

    def _run_news(self) -> RunNews:
        return run_news(self._input.run_id, self._machine.state)

    # --- the store --------------------------------------------------------------------------------

    async def _flush(self, *, last: bool = False) -> None:
        """The run's new events and status to the store (workflows/run_records.py)."""
        await self._records.write(self._input, self._machine.state, self._events, last=last)

    # --- continue-as-new --------------------------------------------------------------------------

    def _can_continue_as_new(self) -> bool:
        return (
            (workflow.info().is_continue_as_new_suggested() or self._input.continue_as_new_each_step)
            and not self._updates  # news that arrived during the step is not in the carry
            and self._stop == self._machine.stop
            and not self._priorities
            and not self._effects
            and not self._records.job_news
            and not self._loads.changes
            and self._deploy is None
            and self._next_cycle is None
            and not self._triggers
            and not self._news
            and not self._watchers.untold(self._run_news())
            and workflow.all_handlers_finished()
            # Its last write is still to come, after the loop (docs/runs.md#the-store).
            and not (self._machine.done and self._last_write_local)
        )

    def _carry(self) -> RunInput:
        carry = RunCarry(
            machine=self._machine,
            next_seq=self._records.flushed,
            watchers=self._watchers.ids(),
            elements_batched=self._batched,
        )
        return self._input.model_copy(update={"carry": carry})


def _carried_machine(carry: RunCarry) -> RunMachine:
    """The machine a continued-as-new run takes over. One continued as new by a release before the patch
    `retry-window` does not say `retry_window_restarts`: that run began before the patch, and keeps the
    window it counted then."""
    machine = carry.machine
    if "retry_window_restarts" in machine.model_fields_set:
        return machine
    return machine.model_copy(update={"retry_window_restarts": True})
