"""FleetWorkflow: one fleet's scheduler, an entity workflow (id ferry/<project>/fleet/<name>), docs/fleets.md.

It deploys the fleet's instances, then serves its jobs for as long as the fleet lives: node 0 of each
replica enqueues the replica's placement request, the scheduler grants whole replicas by priority and
signals each node's JobWorkflow where it goes (`placed`), that it waits (`queued`), or that it can never
be placed (`placement_refused`); jobs give their capacity back (`release`) once their task is removed.
A heartbeating activity watches the instances' health: a lost host's jobs are terminated with
INSTANCE_UNREACHABLE, and a host that comes back is cleaned of their tasks and returns to service. The
same watch (for the local fleet, `watch_local_instance`) reports an instance its agent describes otherwise
than the book knows it: the book takes it as it is now (docs/fleets.md#what-an-instance-is).

Every decision is `core.fleets.book`'s, on the `FleetBook` this workflow keeps (and continues as new
with);
this workflow only runs the activities and sends the signals. Signals are applied in the order they
arrived, after the step in progress, so capacity is never granted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from core.fleets import book
    from core.fleets.book import (
        FleetBook,
        FleetInput,
        apply,
        as_queued,
        deployed,
        fleet_env,
        instance_name,
        schedule,
        undelivered,
    )
    from core.fleets.growth import GroupNews, apply_news, plan_step
    from core.fleets.messages import (
        FLEET_CANCEL,
        FLEET_ENQUEUE,
        FLEET_ENQUEUE_MANY,
        FLEET_INSTANCE_READY,
        FLEET_INSTANCE_UNREACHABLE,
        FLEET_RELEASE,
        FLEET_RELEASE_MANY,
        FLEET_SET_PRIORITY,
        CancelRequest,
        CleanInstance,
        DeleteFleet,
        DeployInstance,
        EnqueueMany,
        FleetCommand,
        FleetDescription,
        FleetResult,
        HealthReport,
        InstanceChange,
        LocalInstance,
        Notice,
        NoticeKind,
        ReleaseJob,
        ReleaseJobs,
        SetQueuedPriorityRequest,
        StopFleet,
        WatchFleet,
        WatchLocal,
    )
    from core.fleets.offers import FleetOffer, offer
    from core.fleets.placement import InstanceSlot, InstanceStatus
    from core.fleets.provisioning import Provisioning, elastic_spec, next_release_at
    from core.fleets.scheduling import QueueIndex
    from core.fleets.status import FleetStatus
    from core.settings import fleet_task_queue
    from core.wire.job_messages import Enqueue, PlacementRequest
    from core.wire.workflow_ids import project_workflows
    from workflows import activity_stubs, retry_policies, signals
    from workflows.fleet_growth import Growth
    from workflows.fleet_notices import NoticeSender
    from workflows.fleet_records import FleetRecordWriter, View
    from workflows.handles import abandon
    from workflows.instance_watches import InstanceWatches

_DEPLOY_TIMEOUT = timedelta(minutes=3)
_HEARTBEAT = timedelta(seconds=10)
# The health watch's heartbeats carry its cancellation (the SDK sends them at most every 0.8 x this):
# a short one lets a watch that the fleet replaced or ended stop soon.
_HEALTH_HEARTBEAT = timedelta(seconds=4)
# Since this patch a step does not wait for its signals' delivery (`_send`).
_SEND_UNBLOCKED = "fleet-send-unblocked"
# Since this patch a step applies at most book.STEP_COMMANDS of what it heard (`_process`).
_STEP_BOUNDED = "fleet-step-bounded"
# Since this patch the fleet continues as new once its history holds book.HISTORY_EVENTS events.
_BOUNDED_HISTORY = "fleet-bounded-history"
# Since this patch the fleet records its queue in the store (`ferry ps`: waiting for capacity) instead of
# telling each job that waits: a dozen history events per queued job (docs/fleets.md#the-queue-in-the-store).
_QUEUE_RECORDED = "fleet-queue-recorded"
# Since this patch the health watch is told what each instance is (its description_key), and reports an
# agent that describes it otherwise; the local fleet has a watch of its own
# (docs/fleets.md#what-an-instance-is).
_DESCRIBED = "instance-descriptions"
# Since this patch a fleet with `nodes` starts with `nodes.target` instances, not `min`
# (docs/backends.md#elastic-fleets).
_NODES_TARGET = "fleet-nodes-target"
# How long an elastic fleet's instance watch waits on a silent agent before its jobs count as lost: the
# backend's own watch tells when an allocation has ended (docs/backends.md#elastic-fleets).
_BACKEND_SILENCE = 24 * 3600.0


@workflow.defn
class FleetWorkflow:
    @workflow.init
    def __init__(self, inp: FleetInput) -> None:
        self._input = inp
        # A continued-as-new fleet takes its book over; a new one deploys its hosts first (`run`).
        self._book = inp.carry if inp.carry is not None else FleetBook(name=inp.name, local=inp.local)
        self._book = self._book.copy_with(env=fleet_env(inp.configuration))  # docs/fleets.md#env
        spec = elastic_spec(inp.configuration) if inp.configuration is not None else None
        if spec is not None and self._book.provisioning is None:  # a fleet with `nodes`: docs/backends.md
            self._book = self._book.copy_with(provisioning=Provisioning(spec=spec))
        self._growth = Growth(inp)
        self._inbox: list[FleetCommand | GroupNews] = []
        self._health: workflow.ActivityHandle[HealthReport] | None = None
        self._health_view: HealthView | None = None
        self._viewed: tuple[FleetBook, View] | None = None
        self._records = FleetRecordWriter(inp.project, inp.name, self._views)
        elastic = inp.configuration is not None and inp.configuration.nodes is not None
        self._watches = InstanceWatches(project_workflows(inp.project), _BACKEND_SILENCE if elastic else None)
        self._watching = False  # whether this run watches its instances (the jobs placed hear of it)
        self._queue_recorded = False  # whether this run records its queue rather than tell the jobs
        self._describing = False  # whether this run's health watch is told what each instance is
        self._notices = NoticeSender(self._inbox, lambda: self._watching)

    # --- messages ---------------------------------------------------------------------------------------

    @workflow.signal(name=FLEET_ENQUEUE)
    def enqueue(self, command: Enqueue) -> None:
        self._inbox.append(command)

    @workflow.signal(name=FLEET_RELEASE)
    def release(self, command: ReleaseJob) -> None:
        self._inbox.append(command)

    @workflow.signal(name=FLEET_ENQUEUE_MANY)
    def enqueue_many(self, command: EnqueueMany) -> None:
        """An array's elements' requests (workflows/elements.py), each as if enqueued on its own."""
        self._inbox.extend(command.enqueues)

    @workflow.signal(name=FLEET_RELEASE_MANY)
    def release_many(self, command: ReleaseJobs) -> None:
        self._inbox.extend(ReleaseJob(job_id=job_id) for job_id in command.job_ids)

    @workflow.signal(name=FLEET_CANCEL)
    def cancel(self, command: CancelRequest) -> None:
        self._inbox.append(command)

    @workflow.signal(name=FLEET_SET_PRIORITY)
    def set_priority(self, command: SetQueuedPriorityRequest) -> None:
        self._inbox.append(command)

    @workflow.signal(name=FLEET_INSTANCE_UNREACHABLE)
    def instance_unreachable(self, change: InstanceChange) -> None:
        self._inbox.append(change.model_copy(update={"status": InstanceStatus.UNREACHABLE, "slot": None}))

    @workflow.signal(name=FLEET_INSTANCE_READY)
    def instance_ready(self, change: InstanceChange) -> None:
        self._inbox.append(change.model_copy(update={"status": InstanceStatus.READY}))

    @workflow.update
    async def delete(self) -> FleetDescription:
        """No new placements; the instances go once their jobs have ended, then the workflow ends."""
        self._inbox.append(DeleteFleet())
        await workflow.wait_condition(lambda: self._book.deleting)
        return self._book.describe()

    @workflow.query
    def describe(self) -> FleetDescription:
        return self._book.describe()

    @workflow.query(name="offer")
    def answer_offer(self, request: PlacementRequest) -> FleetOffer:
        """`ferry offer`: what this fleet would do with the request now; nothing is queued or held."""
        return offer(self._book.name, self._book.scheduler, as_queued(self._book, request))

    # --- the loop ---------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: FleetInput) -> FleetResult:
        # A run begun before the instance watch keeps its jobs watching their tasks themselves.
        self._watching = workflow.patched("instance-watch")
        self._queue_recorded = workflow.patched(_QUEUE_RECORDED)
        self._describing = workflow.patched(_DESCRIBED)
        if inp.carry is None and self._book.provisioning is not None:
            nodes = inp.configuration.nodes if inp.configuration is not None else None
            if nodes is not None and workflow.patched(_NODES_TARGET):  # it starts with TARGET instances
                initial = self._book.provisioning.model_copy(update={"initial": nodes.target})
                self._book = self._book.copy_with(provisioning=initial)
            self._book, notices = deployed(self._book, [], {})  # its instances come from its backend
        elif inp.carry is None:
            slots, failed = await self._deploy(inp)
            self._book, notices = deployed(self._book, slots, failed)
            await self._send(notices)
        while True:
            await self._process()
            self._records.write()
            if self._book.finished():
                await self._finish()
                return FleetResult()
            if await self._continued_as_new():
                continue
            self._watch_health()
            if self._watching:  # the instances that hold jobs: an idle one costs nothing
                instances = self._book.scheduler.instances.values()
                self._watches.keep(sorted(i.name for i in instances if i.allocations))
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: (
                        bool(self._inbox)
                        or self._health_reported()
                        or self._records.due()
                        or self._watches.any_ended()
                        or self._growth.reported()
                    ),
                    timeout=self._next_release(),
                )

    async def _process(self) -> None:
        """Apply what was heard, in order; grant what fits; tell the jobs."""
        if self._health is not None and self._health.done():
            handle, self._health, self._health_view = self._health, None, None
            with contextlib.suppress(ActivityError, CancelledError):
                self._inbox.extend(handle.result().changes)
        self._inbox.extend(self._growth.news())
        notices: list[Notice] = []
        index = QueueIndex()  # kept across the step's enqueues (a burst's step hears thousands)
        limit = book.STEP_COMMANDS if workflow.patched(_STEP_BOUNDED) else None
        taken = 0
        while self._inbox and (limit is None or taken < limit):
            command = self._inbox.pop(0)
            taken += 1
            if isinstance(command, InstanceChange) and command.status == InstanceStatus.READY:
                await self._clean(command.name)
            if isinstance(command, GroupNews):
                self._book, more = apply_news(self._book, command, workflow.now().timestamp())
            else:
                self._book, more = apply(self._book, command, index)
            notices += more
        self._book, more = schedule(self._book, tell_queued=not self._queue_recorded)
        if self._book.provisioning is not None:
            self._book, _ = plan_step(self._book, workflow.now().timestamp())
            self._growth.reconcile(self._book)
        await self._send(notices + more)
        if self._notices.in_flight and (self._book.finished() or _history_long()):
            # Before the workflow ends or continues as new: every signal delivered, or back in the inbox.
            await workflow.wait_condition(lambda: not self._notices.in_flight)

    async def _send(self, notices: list[Notice]) -> None:
        """Signal each job; a job that has ended gets nothing: what it was granted or waits for goes.

        A step's signals go by one local activity (milliseconds): one marker in the fleet's history, where
        the fleet's own signals cost two events each and a workflow task to hear of their delivery. One
        that cannot be delivered comes back through the inbox (`Undelivered`); a job's signals arrive in
        the order they were sent (docs/fleets.md#the-workflow-and-its-book)."""
        if workflow.patched(signals.LOCAL_HOT_PATH):
            await self._notices.send_locally(notices)
        elif workflow.patched(_SEND_UNBLOCKED):
            self._notices.send_unblocked(notices)
        else:  # a history begun before: each step waited for its signals
            await self._send_and_wait(notices)

    async def _send_and_wait(self, notices: list[Notice]) -> None:
        """Before `_SEND_UNBLOCKED`: the step waits until every signal is delivered or has failed."""
        while notices:
            sent = [self._notices.signal(notice) for notice in notices]
            results = await asyncio.gather(*sent, return_exceptions=True)
            failed = [notice for notice, result in zip(notices, results, strict=True) if result is not None]
            for notice in failed:
                self._book = undelivered(self._book, notice)
            notices = []
            if any(n.kind in (NoticeKind.PLACED, NoticeKind.QUEUED) for n in failed):
                self._book, notices = schedule(self._book)

    # --- activities -------------------------------------------------------------------------------------

    async def _deploy(self, inp: FleetInput) -> tuple[list[InstanceSlot], dict[str, str]]:
        """The first deployment: every host at once; a host that fails is tried again by the health watch."""
        if inp.configuration is None:
            slot = await workflow.execute_activity(
                activity_stubs.local_instance,
                LocalInstance(fleet=inp.name),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=retry_policies.QUICK,
            )
            return [slot], {}
        hosts = len(inp.configuration.ssh_config.hosts) if inp.configuration.ssh_config else 0
        results = await asyncio.gather(
            *(
                workflow.execute_activity(
                    activity_stubs.deploy_instance,
                    DeployInstance(
                        project=inp.project, fleet=inp.name, index=index, configuration=inp.configuration
                    ),
                    start_to_close_timeout=_DEPLOY_TIMEOUT,
                    heartbeat_timeout=_HEARTBEAT,
                    retry_policy=retry_policies.DEPLOY,
                )
                for index in range(hosts)
            ),
            return_exceptions=True,
        )
        slots = [r for r in results if isinstance(r, InstanceSlot)]
        failed = {
            instance_name(inp.name, index): _why(r)
            for index, r in enumerate(results)
            if isinstance(r, BaseException)
        }
        return slots, failed

    async def _clean(self, name: str) -> None:
        """Before a lost host takes jobs again: the tasks of the jobs that failed with it removed."""
        jobs = self._book.lost.get(name, [])
        if not jobs:
            return
        with contextlib.suppress(ActivityError):
            await workflow.execute_activity(
                activity_stubs.clean_instance,
                CleanInstance(instance=name, job_ids=jobs),
                start_to_close_timeout=timedelta(minutes=1),
                heartbeat_timeout=_HEARTBEAT,
                retry_policy=retry_policies.FEW_TRIES,
            )

    def _watch_health(self) -> None:
        """The health watch of the instances, started again whenever what it watches changes: their
        statuses, and (since `_DESCRIBED`) what each is."""
        view = self._health_watched()
        if self._health is not None and view == self._health_view:
            return
        if self._health is not None:
            abandon(self._health)
            self._health = self._health_view = None
        if view is None:
            return
        inp = self._input
        self._health_view = view
        ready, unreachable, described = view
        if inp.configuration is None:
            self._health = workflow.start_activity(
                activity_stubs.watch_local_instance,
                WatchLocal(fleet=inp.name, described=described[ready[0]]),
                start_to_close_timeout=timedelta(days=365),
                heartbeat_timeout=_HEALTH_HEARTBEAT,
                retry_policy=retry_policies.QUICK,
            )
            return
        self._health = workflow.start_activity(
            activity_stubs.watch_fleet_health,
            WatchFleet(
                project=inp.project,
                fleet=inp.name,
                configuration=inp.configuration,
                ready=ready,
                unreachable=unreachable,
                described=described,
            ),
            start_to_close_timeout=timedelta(days=365),
            heartbeat_timeout=_HEALTH_HEARTBEAT,
            retry_policy=retry_policies.QUICK,
        )

    def _health_watched(self) -> HealthView | None:
        """(ready, unreachable or never deployed, what each ready one is) instances; None when there is
        nothing to watch. The local instance is watched only for what it is (since `_DESCRIBED`)."""
        current = self._book
        if current.deleting or (self._input.configuration is None and not self._describing):
            return None
        if current.provisioning is not None:  # its backend's watch follows its instances
            return None
        instances = current.scheduler.instances.values()
        ready_slots = sorted((i for i in instances if i.status == InstanceStatus.READY), key=lambda i: i.name)
        ready = [i.name for i in ready_slots]
        described = {i.name: i.description_key() for i in ready_slots} if self._describing else {}
        if self._input.configuration is None:
            return (ready, [], described) if ready else None
        unreachable = (i.name for i in instances if i.status == InstanceStatus.UNREACHABLE)
        lost = sorted([*unreachable, *current.pending])
        return (ready, lost, described) if ready or lost else None

    def _health_reported(self) -> bool:
        return self._health is not None and self._health.done()

    def _views(self) -> View:
        """The fleet's status, its instances' views and its queue (if it records it), computed once per
        book: the records ask at every activation (the wait's condition included). A book is never
        changed, only replaced, so the same book has the same views (docs/scaling.md)."""
        current = self._book
        if self._viewed is None or self._viewed[0] is not current:
            status = FleetStatus.DELETING if current.deleting else FleetStatus.ACTIVE
            waiting = current.waiting_jobs() if self._queue_recorded else None
            self._viewed = (current, (status, current.views(), waiting, current.waiting_why()))
        return self._viewed[1]

    def _next_release(self) -> timedelta | None:
        """How long until an idle group of an elastic fleet is due for release; None: no timer."""
        provisioning = self._book.provisioning
        due = None if provisioning is None else next_release_at(provisioning, self._book.scheduler)
        if due is None:
            return None
        return timedelta(seconds=max(1.0, due - workflow.now().timestamp()))

    async def _settle(self) -> None:
        """The health watch stopped and the last record written, before the workflow ends or goes on anew."""
        self._watches.stop()
        self._growth.stop()
        if self._health is not None:
            self._health.cancel()
            with contextlib.suppress(ActivityError, CancelledError):
                await self._health
            self._health = self._health_view = None
        await self._records.settle()

    async def _finish(self) -> None:
        await self._settle()
        inp = self._input
        await workflow.execute_activity(
            activity_stubs.stop_fleet,
            StopFleet(project=inp.project, fleet=inp.name, configuration=inp.configuration),
            start_to_close_timeout=timedelta(minutes=2),
            heartbeat_timeout=timedelta(seconds=30),
            retry_policy=retry_policies.FEW_TRIES,
        )

    async def _continued_as_new(self) -> bool:
        """Continue as new with the whole book when the history grows long; False if news came first."""
        if not _history_long() or self._inbox:
            return False
        await self._settle()
        if self._inbox or not workflow.all_handlers_finished():
            return False
        inp = self._input
        # A fleet begun on the workers' own queue moves to the fleets' queue here (worker/main.py).
        workflow.continue_as_new(
            inp.model_copy(update={"carry": self._book}),
            task_queue=fleet_task_queue(workflow.info().task_queue),
        )


# The health watch's view: ready instances, those lost or never deployed, and what each ready one is.
HealthView = tuple[list[str], list[str], dict[str, str]]


def _history_long() -> bool:
    info = workflow.info()
    if info.is_continue_as_new_suggested():
        return True
    return workflow.patched(_BOUNDED_HISTORY) and info.get_current_history_length() >= book.HISTORY_EVENTS


def _why(error: BaseException) -> str:
    cause = error.cause if isinstance(error, ActivityError) else None
    text = cause.message if isinstance(cause, FailureError) else str(error)
    return " ".join(text.split())[:300]
