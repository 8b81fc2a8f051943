"""ElementsWorkflow: an array's elements, one workflow for all of a run's (docs/runs.md#arrays).

Each element is a job submission with its own eventlog, status, retries and log, as a JobWorkflow's job is
(core.jobs.elements); what they share is the workflow and its batches. Each step of this workflow takes
every element that is ready for the same thing into one batch: their placement requests go to the fleet in
one signal (`enqueue_many`), and the fleet answers a step's grants in one signal (`fleet_notices`); the
placed elements start in one activity (`start_many`), the ended ones are removed in one local activity
(`remove_many`) and released in one signal (`release_many`), and their news goes to the run in one signal
(`job_updates`). Each element's task end still comes from its instance's watch (`task_ended`).

The run adds elements by signal as it submits them (`add_elements`), and starts this workflow again with
them when it has ended: it ends once every element it holds is done and its news is told.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from core.fleets.messages import (
        ELEMENTS_NOTICES,
        FLEET_ENQUEUE_MANY,
        FLEET_RELEASE_MANY,
        EnqueueMany,
        FleetNotices,
        NoticeKind,
        ReleaseJobs,
    )
    from core.jobs import elements as el
    from core.jobs import transitions as job
    from core.jobs.elements import Element, ElementPhase
    from core.jobs.phases import grace_seconds
    from core.status import JobStatus, JobTerminationReason
    from core.wire.element_messages import (
        ELEMENT_SSH_ENDPOINT,
        ELEMENTS_ADD,
        ELEMENTS_TERMINATE,
        RUN_JOB_UPDATES,
        AddElements,
        ElementRef,
        ElementsInput,
        JobUpdates,
        RemoveMany,
        StartMany,
        StopMany,
        TerminateElements,
    )
    from core.wire.job_messages import JobInput, TerminateJobRequest
    from core.wire.messages import (
        TASK_ENDED,
        JobOutcome,
        PrepareAndStart,
        SSHEndpoint,
        SSHEndpointRequest,
        StopTask,
        TaskRef,
        WatchJob,
    )
    from workflows import activity_stubs, retry_policies, signals

_STEP_TIMEOUT = timedelta(minutes=10)  # a batch of starts: image pulls and code archives may take a while
_STEP_HEARTBEAT = timedelta(seconds=10)
_STOP_MARGIN = 30.0  # seconds past an element's grace period before its agent is presumed gone
_REMOVE_TIMEOUT = timedelta(minutes=2)
# A batch of process starts (each tried again for up to two minutes when its agent does not answer).
_LOCAL_START_TIMEOUT = timedelta(minutes=3)  # a batch of removals, each tried for about half a minute


@workflow.defn
class ElementsWorkflow:
    @workflow.init
    def __init__(self, inp: ElementsInput) -> None:
        self._run_workflow_id = inp.run_workflow_id
        self._elements: dict[str, Element] = {}  # every element, by job submission id
        self._waiting: collections.deque[Element] = collections.deque()  # NEW, in order: for max_parallel
        self._live: dict[str, Element] = {}  # the others until they are done and told
        self._incoming: list[JobInput] = list(inp.elements)
        self._max_parallel = inp.max_parallel
        self._stops: list[tuple[str, TerminateJobRequest]] = []
        self._changed = True
        self._in_flight = 0  # batches on their way
        self._news: asyncio.Future[None] | None = None
        self._failures: list[BaseException] = []  # a batch's bug: raised by the loop, failing its task

    # --- messages ---------------------------------------------------------------------------------

    @workflow.signal(name=ELEMENTS_ADD)
    def add_elements(self, more: AddElements) -> None:
        self._incoming += more.elements
        self._max_parallel = more.max_parallel
        self._changed = True

    @workflow.signal(name=ELEMENTS_TERMINATE)
    def terminate_elements(self, request: TerminateElements) -> None:
        self._stops += [(stop.job_submission_id, stop.request) for stop in request.stops]
        self._changed = True

    @workflow.signal(name=ELEMENTS_NOTICES)
    def fleet_notices(self, notices: FleetNotices) -> None:
        for notice in notices.notices:
            element = self._elements.get(notice.job_id)
            if element is None:
                continue
            control = element.control
            if notice.kind == NoticeKind.PLACED and notice.placement is not None:
                element.control = control.on_placed(notice.placement)
            elif notice.kind == NoticeKind.REFUSED:
                element.control = control.on_refused(notice.message or "no capacity")
            elif notice.kind == NoticeKind.QUEUED:
                element.control = control.on_queued()
            else:
                element.control = control.on_terminate(
                    TerminateJobRequest(
                        reason=notice.reason, message=notice.message, instance_gone=notice.instance_gone
                    )
                )
        self._changed = True

    @workflow.signal(name=TASK_ENDED)
    def task_ended(self, outcome: JobOutcome) -> None:
        """From an instance's watch: an element's task has ended, its log stored."""
        element = self._elements.get(outcome.task_id or "")
        if element is not None:
            element.control = element.control.on_task_ended(outcome, element.id)
            self._changed = True

    @workflow.update(name=ELEMENT_SSH_ENDPOINT)
    async def element_ssh_endpoint(self, ref: ElementRef) -> SSHEndpoint:
        """`ferry attach` to an element, as JobWorkflow.ssh_endpoint answers for a job."""
        element = self._elements.get(ref.job_submission_id)
        if element is None:
            return SSHEndpoint(refused="this element's submission is not running")
        if element.control.terminate is not None:
            return SSHEndpoint(refused="the job is stopping")
        if element.state.status != JobStatus.RUNNING or element.state.instance is None:
            return SSHEndpoint(refused=f"the job is {element.state.status}")
        request = SSHEndpointRequest(job_submission_id=element.id, instance_name=element.state.instance)
        return await workflow.execute_activity(
            activity_stubs.ssh_endpoint,
            request,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=retry_policies.FEW_TRIES,
        )

    # --- the loop ---------------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: ElementsInput) -> None:
        """Until every element is done and told. Elements the run adds meanwhile are taken in: the
        server refuses to end a workflow in the task during which a signal came, and the task redone
        hears it first."""
        while not self._finished():
            await self._wait()
            if self._failures:
                raise self._failures[0]
            self._changed = False
            now = workflow.now().timestamp()
            self._take_in(now)
            for element in self._live.values():
                if element.phase == ElementPhase.PLACING and not element.busy:
                    el.placement_step(element, now)
                el.end_if_over(element, now)
            self._launch(now)
            self._publish(now)
            told = [e.id for e in self._live.values() if e.phase == ElementPhase.DONE and not e.unsent]
            for job_id in told:
                del self._live[job_id]

    def _finished(self) -> bool:
        return (
            not self._incoming
            and not self._stops
            and self._in_flight == 0
            and (self._news is None or self._news.done())
            and not self._waiting
            and not self._live
        )

    async def _wait(self) -> None:
        """Until something is heard or done, or a stopped element's deadline passes (a durable timer)."""
        if self._changed:
            return
        deadlines = [e.stop_deadline for e in self._live.values() if e.phase == ElementPhase.RUNNING]
        due = min((d for d in deadlines if d is not None), default=None)
        timeout = None
        if due is not None:
            timeout = timedelta(seconds=max(due - workflow.now().timestamp(), 0.0))
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(lambda: self._changed, timeout=timeout)

    def _take_in(self, now: float) -> None:
        incoming, self._incoming = self._incoming, []
        for inp in incoming:
            element = el.new_element(inp, now)
            if element.id not in self._elements:  # the run's signal sent again: the first stands
                self._elements[element.id] = element
                self._waiting.append(element)
        stops, self._stops = self._stops, []
        for job_id, request in stops:
            stopped = self._elements.get(job_id)
            if stopped is None or stopped.phase in (ElementPhase.CLEANING, ElementPhase.DONE):
                continue
            stopped.control = stopped.control.on_terminate(request)
            if stopped.phase == ElementPhase.NEW:  # stopped before it was enqueued: nothing to withdraw
                self._waiting.remove(stopped)
                el.log_stop(stopped, now)
                stopped.phase = ElementPhase.ENDED
                self._live[stopped.id] = stopped

    # --- batches ----------------------------------------------------------------------------------

    def _launch(self, now: float) -> None:
        ready: dict[ElementPhase, list[Element]] = {}
        stops: list[tuple[Element, TerminateJobRequest]] = []
        room = self._max_parallel - sum(e.phase in el.ACTIVE for e in self._live.values())
        while room > 0 and self._waiting:
            element = self._waiting.popleft()
            self._live[element.id] = element
            room -= 1
        for element in self._live.values():
            if element.busy:
                continue
            if element.phase == ElementPhase.STARTING and element.control.terminate is not None:
                el.log_stop(element, now)  # placed and stopped at once: freed without a start
                element.phase = ElementPhase.ENDED
            request = el.stop_needed(element)
            if request is not None:
                el.log_stop(element, now)
                el.stop_sent(element, request, now, _STOP_MARGIN)
                stops.append((element, request))
            if element.phase in (ElementPhase.NEW, ElementPhase.STARTING, ElementPhase.ENDED):
                ready.setdefault(element.phase, []).append(element)
        for phase, batch in ready.items():
            for element in batch:
                element.busy = True
            if phase == ElementPhase.NEW:
                for element in batch:
                    element.phase = ElementPhase.PLACING
                self._spawn(self._enqueue(batch))
            elif phase == ElementPhase.STARTING:
                self._spawn(self._start(batch))
            else:
                for element in batch:
                    element.phase = ElementPhase.CLEANING
                self._spawn(self._clean(batch))
        if stops:
            self._spawn(self._stop(stops))

    def _spawn(self, batch: Coroutine[Any, Any, None]) -> None:
        self._in_flight += 1
        task = asyncio.ensure_future(batch)
        task.add_done_callback(self._landed)

    def _landed(self, done: asyncio.Future[None]) -> None:
        self._in_flight -= 1
        self._changed = True
        failure = done.exception()
        if failure is not None:
            self._failures.append(failure)

    def _signal(self, workflow_id: str, name: str, arg: Any, what: list[str]) -> signals.Signal:
        """Its request id names what it carries, not when it was sent: a workflow task redone (its local
        activities run again, and finish in another order) sends each again as a repeat the server drops."""
        digest = hashlib.sha256("\n".join(what).encode()).hexdigest()[:32]
        return signals.signal(workflow_id, name, arg, f"{name}-{digest}")

    async def _enqueue(self, batch: list[Element]) -> None:
        """Their placement requests to their fleet, in one signal; its answers come to this workflow."""
        me = workflow.info().workflow_id
        by_fleet: dict[str, list[Element]] = {}
        for element in batch:
            by_fleet.setdefault(element.input.fleet_workflow_id, []).append(element)
        sent = []
        for fleet, elements in by_fleet.items():
            enqueues = [
                e.input.enqueue.model_copy(update={"notify": dict.fromkeys(e.input.enqueue.notify, me)})
                for e in elements
                if e.input.enqueue is not None
            ]
            if enqueues:
                many = EnqueueMany(enqueues=enqueues)
                ids = [e.id for e in elements]
                sent.append((elements, self._signal(fleet, FLEET_ENQUEUE_MANY, many, ids)))
        delivered = await signals.send(*(signal for _, signal in sent))
        now = workflow.now().timestamp()
        for (elements, _), ok in zip(sent, delivered, strict=True):
            for element in elements if not ok else []:
                el.fleet_not_running(element, now)
        for element in batch:
            element.busy = False

    async def _start(self, batch: list[Element]) -> None:
        me = workflow.info().workflow_id
        steps = []
        for element in batch:
            placement = element.control.placement
            assert placement is not None  # STARTING: placed
            owner = me if placement.watched else None
            prepare = job.prepare_task(element.input, element.id, placement, owner)
            start = job.start_job(element.input, element.id, placement)
            steps.append(PrepareAndStart(prepare=prepare, start=start))
        try:
            if any(element.input.container is not None for element in batch):  # a pull may take minutes
                answer = await workflow.execute_activity(
                    activity_stubs.start_many,
                    StartMany(steps=steps),
                    start_to_close_timeout=_STEP_TIMEOUT,
                    heartbeat_timeout=_STEP_HEARTBEAT,
                    retry_policy=retry_policies.QUICK,
                )
            else:  # processes start in milliseconds: a local activity, one marker in the history
                answer = await workflow.execute_local_activity(
                    activity_stubs.start_many,
                    StartMany(steps=steps),
                    start_to_close_timeout=_LOCAL_START_TIMEOUT,
                    retry_policy=retry_policies.QUICK,
                )
        except ActivityError as err:  # not an element's failure: the batch's (its timeout)
            now = workflow.now().timestamp()
            for element in batch:
                el.failed_to_start(element, now, JobTerminationReason.EXECUTOR_ERROR, str(err.cause or err))
                element.busy = False
            return
        now = workflow.now().timestamp()
        for element, result in zip(batch, answer.results, strict=True):
            element.busy = False
            if result.failure is not None:
                reason = job.reason_for_failure(result.failure.type, JobTerminationReason.EXECUTOR_ERROR)
                el.failed_to_start(element, now, reason, result.failure.message)
                continue
            el.started(element, now, result.published)
            placement = element.control.placement
            if placement is not None and not placement.watched:  # a fleet begun before the instance watch
                self._watch(element, placement.instance_name)

    def _watch(self, element: Element, instance: str) -> None:
        handle = workflow.start_activity(
            activity_stubs.watch_job,
            WatchJob(job_submission_id=element.id, instance_name=instance),
            start_to_close_timeout=timedelta(days=365),
            heartbeat_timeout=timedelta(seconds=20),
            retry_policy=retry_policies.QUICK,
        )
        handle.add_done_callback(_told(element, self._heard))

    def _heard(self) -> None:
        self._changed = True

    async def _stop(self, stops: list[tuple[Element, TerminateJobRequest]]) -> None:
        """SIGTERM to each, SIGKILL after its grace period: the agents carry it out."""
        requests = [
            StopTask(
                job_submission_id=element.id,
                instance_name=element.control.instance or "",
                reason=request.reason,
                message=request.message,
                timeout=grace_seconds(request, element.input.stop_duration),
            )
            for element, request in stops
        ]
        with contextlib.suppress(ActivityError):  # an agent gone: its instance's watch says so
            await workflow.execute_activity(
                activity_stubs.stop_many,
                StopMany(stops=requests),
                start_to_close_timeout=timedelta(minutes=1),
                retry_policy=retry_policies.FEW_TRIES,
            )

    async def _clean(self, batch: list[Element]) -> None:
        """Their tasks removed, their capacity released: their last events."""
        removing = [element for element in batch if el.needs_removal(element)]
        problems: list[str | None] = [None] * len(removing)
        if removing:
            refs = [TaskRef(job_submission_id=e.id, instance_name=e.control.instance or "") for e in removing]
            try:
                answer = await workflow.execute_local_activity(
                    activity_stubs.remove_many,
                    RemoveMany(refs=refs),
                    start_to_close_timeout=_REMOVE_TIMEOUT,
                    retry_policy=retry_policies.QUICK,
                )
                problems = list(answer.problems)
            except ActivityError as err:
                problems = [f"could not remove the task: {err.cause or err}"] * len(removing)
        found = dict(zip((e.id for e in removing), problems, strict=True))
        releasing = [element.id for element in batch if element.control.must_release()]
        now = workflow.now().timestamp()
        for element in batch:
            el.cleaned(element, now, found.get(element.id))
        if releasing:
            fleet = batch[0].input.fleet_workflow_id
            release = ReleaseJobs(job_ids=releasing)
            await signals.send(self._signal(fleet, FLEET_RELEASE_MANY, release, releasing))
        for element in batch:
            element.busy = False

    # --- news -------------------------------------------------------------------------------------

    def _publish(self, now: float) -> None:
        """Every element's new events to the run, in one signal; one on its way at a time."""
        if self._news is not None and not self._news.done():
            return
        updates = self._updates(now)
        if updates is not None:
            self._news = asyncio.ensure_future(self._tell(updates))
            self._news.add_done_callback(lambda _: self._heard())

    def _updates(self, now: float) -> JobUpdates | None:
        updates = []
        for element in self._live.values():
            if element.unsent:
                start, element.sent = element.sent, len(element.events)
                new = element.events[start:]
                updates.append(job.job_update(element.input, element.state, now, start, new))
        return JobUpdates(updates=updates) if updates else None

    async def _tell(self, updates: JobUpdates) -> None:
        what = [
            f"{u.record.job_submission_id}/{u.record.start_seq}/{len(u.record.events)}"
            for u in updates.updates
        ]
        await signals.send(self._signal(self._run_workflow_id, RUN_JOB_UPDATES, updates, what))


def _told(element: Element, heard: Callable[[], None]) -> Callable[[Any], None]:
    """An element's own watch has ended: how its task ended, or that its agent could not tell."""

    def done(handle: Any) -> None:
        try:
            outcome = handle.result()
        except (ActivityError, FailureError, ApplicationError) as err:
            outcome = JobOutcome(
                termination_reason=JobTerminationReason.EXECUTOR_ERROR, termination_message=str(err)
            )
        element.control = element.control.on_task_ended(outcome, element.id)
        heard()

    return done
