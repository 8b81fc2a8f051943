"""The fleet scheduler's book and its decisions, pure: what FleetWorkflow keeps and what it does next.

`FleetWorkflow` (workflows/fleet.py) is an entity workflow, one per fleet. Every message it hears (a
replica to place, a job's capacity back, a lost host...) is applied here to its `FleetBook`, which returns
the new book and the `Notice`s for JobWorkflows; the workflow only sends them and runs the activities.
The book is also the workflow's continue-as-new argument, so it holds everything: the scheduler's state
(core.fleets.scheduling), whom to tell about each job, the jobs a lost host took with it, the hosts not
deployed.

- A replica is placed whole or not at all, by priority then submission order (core.fleets.scheduling).
- A replica no instance could ever hold is refused at once (FAILED_TO_START_DUE_TO_NO_CAPACITY); one that
  waits is in the queue the fleet records in the store, for `ferry ps` to say "waiting for capacity" (a
  fleet begun before that tells each such replica once instead: `queued`).
- A lost host's jobs are told to terminate (INSTANCE_UNREACHABLE); their capacity stays held until each
  job releases it, and their tasks are removed from the host when it is back, before it takes new jobs.
- The local fleet shares its one instance by exact needs, so a gang's nodes may share it (no spread).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from core.configuration import FleetConfiguration
from core.fleets.messages import (
    CancelRequest,
    DeleteFleet,
    FleetCommand,
    FleetDescription,
    InstanceChange,
    InstanceView,
    Notice,
    NoticeKind,
    QueuedRequest,
    ReleaseJob,
    SetQueuedPriorityRequest,
    Undelivered,
)
from core.fleets.placement import InstanceSlot, InstanceStatus
from core.fleets.provisioning import GroupPhase, Provisioning, never_fits
from core.fleets.scheduling import QueueIndex, SchedulerState
from core.status import JobTerminationReason
from core.wire.agent_api import ClusterInfo, Resources
from core.wire.base import Frozen
from core.wire.job_messages import Enqueue, Placement, PlacementRequest

__all__ = ["DeleteFleet", "FleetBook", "FleetInput", "apply", "deployed", "schedule"]


def instance_name(fleet: str, index: int) -> str:
    """The name of an SSH fleet's host, by its position in `ssh_config.hosts`."""
    return f"{fleet}-{index}"


# --- the book ------------------------------------------------------------------------------------------


class FleetBook(Frozen):
    name: str
    local: bool
    scheduler: SchedulerState = Field(default_factory=SchedulerState)
    notify: dict[str, str] = Field(default_factory=dict, description="job id -> JobWorkflow id")
    told_queued: list[str] = Field(default_factory=list, description="requests whose jobs know they wait")
    lost: dict[str, list[str]] = Field(
        default_factory=dict,
        description="instance -> jobs failed by its loss, whose tasks go when it is back",
    )
    pending: dict[str, str] = Field(default_factory=dict, description="hosts not deployed yet, and why")
    gone: list[str] = Field(
        default_factory=list, description="jobs that ended before their replica was enqueued (the last few)"
    )
    deployed: bool = False
    deleting: bool = False
    provisioning: Provisioning | None = Field(
        default=None, description="a fleet with `nodes`: its backend's groups (core.fleets.provisioning)"
    )
    env: dict[str, str] = Field(default_factory=dict, description="the fleet's `env`, in each placement")

    def copy_with(self, **update: Any) -> FleetBook:
        return self.model_copy(update=update)

    def describe(self) -> FleetDescription:
        waiting = self.scheduler.waiting()
        queue = [
            QueuedRequest(
                request_id=r.request_id, priority=r.priority, position=n, jobs=[x.job_id for x in r.nodes]
            )
            for n, r in enumerate(waiting, start=1)
        ]
        return FleetDescription(
            name=self.name,
            local=self.local,
            deployed=self.deployed,
            deleting=self.deleting,
            instances=self.scheduler.capacity(),
            pending=dict(self.pending),
            queue=queue,
            idle=self.scheduler.idle(),
        )

    def waiting_jobs(self) -> list[str]:
        """The jobs of the replicas that wait, in the order they are served."""
        return [node.job_id for request in self.scheduler.waiting() for node in request.nodes]

    def waiting_why(self) -> dict[str, str]:
        """What each waiting job of an elastic fleet waits for: the group being made for it, in its
        backend's words (`ferry ps`: docs/backends.md#elastic-fleets)."""
        if self.provisioning is None:
            return {}
        groups = {g.for_request: g for g in self.provisioning.groups.values() if g.for_request}
        why: dict[str, str] = {}
        for request in self.scheduler.queue:
            group = groups.get(request.request_id)
            if group is None:
                words = f"fleet {self.name} has its most instances ({self.provisioning.spec.max})"
            elif group.phase == GroupPhase.SUBMITTING:
                words = "an instance is being asked for"
            elif group.phase == GroupPhase.WAITING:
                words = _group_words(group.backend_id, group.reason or "pending")
            else:
                words = _group_words(group.backend_id, "its agent is starting")
            why |= {node.job_id: words for node in request.nodes}
        return why

    def finished(self) -> bool:
        """A deleted fleet whose last job has released its capacity: the workflow may end."""
        groups = self.provisioning.groups if self.provisioning is not None else {}
        return self.deleting and not self.scheduler.instances and not self.scheduler.queue and not groups

    def never_fits(self, request: PlacementRequest) -> str | None:
        """Why no instance of the fleet could ever hold the replica, nor any it could create."""
        if self.provisioning is not None:
            return never_fits(self.scheduler, self.provisioning.spec, request, self.name)
        return self.scheduler.never_fits(request, self.name)

    def views(self) -> list[InstanceView]:
        """Each instance's view in the store: its load counted, its jobs not listed (a fleet's step asks)."""
        rows = []
        for slot in self.scheduler.instances.values():
            busy, used = slot.used()
            rows.append(
                InstanceView(
                    name=slot.name,
                    status=slot.status.value,
                    address=slot.address,
                    total=slot.total,
                    blocks=slot.blocks,
                    busy_blocks=busy,
                    jobs=len(slot.allocations),
                    in_use=used,
                    hardware=slot.hardware,
                    container_engine=slot.container_engine,
                    agent_release=slot.agent_release,
                )
            )
        rows += [
            InstanceView(
                name=name,
                status=InstanceStatus.UNREACHABLE.value,
                address="",
                total=Resources(),
                blocks=None,
                busy_blocks=0,
                jobs=0,
                message=why,
            )
            for name, why in sorted(self.pending.items())
        ]
        groups = self.provisioning.groups.values() if self.provisioning is not None else ()
        rows += [
            InstanceView(
                name=name,
                status=f"{group.phase.value}",
                address="",
                total=Resources(),
                blocks=None,
                busy_blocks=0,
                jobs=0,
                message=_group_words(group.backend_id, group.reason),
            )
            for group in groups
            if group.phase != GroupPhase.READY
            for name in group.instances
            if name not in self.scheduler.instances
        ]
        return sorted(rows, key=lambda row: row.name)


def _group_words(backend_id: str | None, reason: str | None) -> str:
    words = f"Slurm job {backend_id}" if backend_id else "being asked for"
    return f"{words}: {reason}" if reason else words


# The most commands one step applies; the rest wait for the next step, after this one's signals (a local
# activity, which ends the workflow's activation): an activation that has not yielded after 2 s is taken
# for a deadlock, and a burst's step may hear ten thousand enqueues (docs/fleets.md#scheduling).
STEP_COMMANDS = 256
# The fleet continues as new once its history holds this many events, if the server has not suggested it
# sooner (at 4,096): a replay reads the whole history, and the 9,000 events of a fleet that could not
# continue took longer than the SDK's 2 s deadlock limit (docs/scaling.md#the-fleets-own-queue).
HISTORY_EVENTS = 2_000


class FleetInput(Frozen):
    project: str
    name: str
    configuration: FleetConfiguration | None = None  # None: the local fleet
    carry: FleetBook | None = None  # a continued-as-new execution's book
    backend: str | None = None  # a fleet with `nodes`: the project's backend that creates its instances

    @property
    def local(self) -> bool:
        return self.configuration is None


Step = tuple[FleetBook, list[Notice]]
GONE_KEPT = 1000


def _refusals(notify: dict[str, str], request: PlacementRequest, why: str) -> list[Notice]:
    return [
        Notice(kind=NoticeKind.REFUSED, job_id=n.job_id, workflow_id=notify[n.job_id], message=why)
        for n in request.nodes
        if n.job_id in notify
    ]


def deployed(book: FleetBook, slots: list[InstanceSlot], failed: dict[str, str]) -> Step:
    """The first deployment is over: its instances join, and what waited for them is checked."""
    scheduler = book.scheduler
    for slot in slots:
        scheduler = scheduler.add_instance(slot)
    book = book.copy_with(scheduler=scheduler, pending={**book.pending, **failed}, deployed=True)
    return _refuse_unplaceable(book)


def _refuse_unplaceable(book: FleetBook) -> Step:
    notices: list[Notice] = []
    unplaceable = book.scheduler.unplaceable(book.name)
    if book.provisioning is not None:  # what new instances could hold waits for them
        waiting = {r.request_id: r for r in book.scheduler.queue}
        unplaceable = {k: v for k, v in unplaceable.items() if book.never_fits(waiting[k]) is not None}
    for request_id, why in unplaceable.items():
        [request] = [r for r in book.scheduler.queue if r.request_id == request_id]
        notices += _refusals(book.notify, request, why)
        book = _forget(book.copy_with(scheduler=book.scheduler.cancel(request_id)), request)
    return book, notices


def _forget(book: FleetBook, request: PlacementRequest) -> FleetBook:
    jobs = {node.job_id for node in request.nodes}
    return book.copy_with(
        notify={job: wid for job, wid in book.notify.items() if job not in jobs},
        told_queued=[r for r in book.told_queued if r != request.request_id],
    )


def apply(book: FleetBook, command: FleetCommand, index: QueueIndex | None = None) -> Step:
    """One message heard by the fleet, applied to its book. `index`: one kept for the step's commands,
    so that each enqueue costs what it adds, not the queue's length."""
    if isinstance(command, Enqueue):
        return _enqueue(book, command, index)
    if isinstance(command, ReleaseJob):
        return _release(book, command.job_id)
    if isinstance(command, CancelRequest):
        return _cancel(book, command.request_id), []
    if isinstance(command, SetQueuedPriorityRequest):
        scheduler = book.scheduler
        for request_id in command.request_ids:
            scheduler = scheduler.set_priority(request_id, command.priority)
        return book.copy_with(scheduler=scheduler), []
    if isinstance(command, InstanceChange):
        if command.status == InstanceStatus.UNREACHABLE:
            return _lost(book, command)
        return _back(book, command)
    if isinstance(command, Undelivered):
        return undelivered(book, command.notice), []
    return _delete(book)


def _release(book: FleetBook, job_id: str) -> Step:
    """A job gives its capacity back; one that never got any (stopped while waiting) withdraws its replica."""
    if book.scheduler.job_instance(job_id) is not None:
        notify = dict(book.notify)
        notify.pop(job_id, None)
        return book.copy_with(scheduler=book.scheduler.release(job_id), notify=notify), []
    request = next((r for r in book.scheduler.queue if any(n.job_id == job_id for n in r.nodes)), None)
    if request is None:  # its replica is not enqueued yet (or was dropped): it must not be placed later
        return book.copy_with(gone=[*book.gone, job_id][-GONE_KEPT:]), []
    others = {job: wid for job, wid in book.notify.items() if job != job_id}
    notices = _refusals(others, request, "another node of its replica was stopped before it was placed")
    return _cancel(book, request.request_id), notices


def as_queued(book: FleetBook, request: PlacementRequest) -> PlacementRequest:
    """The request as the fleet queues it: for its own instances; on the local one, nodes share it."""
    return request.model_copy(update={"fleets": None, "spread": request.spread and not book.local})


def _enqueue(book: FleetBook, command: Enqueue, index: QueueIndex | None) -> Step:
    request = as_queued(book, command.request)
    index = (index or QueueIndex()).of(book.scheduler.queue)
    if book.scheduler.knows(request, index):
        return book, []
    withdrawn = {n.job_id for n in request.nodes} & set(book.gone)
    if withdrawn:
        gone = [job for job in book.gone if job not in withdrawn]
        notify = {job: wid for job, wid in command.notify.items() if job not in withdrawn}
        stopped = "another node of its replica was stopped before it was placed"
        return book.copy_with(gone=gone), _refusals(notify, request, stopped)
    if book.deleting:
        return book, _refusals(command.notify, request, f"fleet {book.name} is being deleted")
    why = book.never_fits(request) if book.deployed else None
    if why is not None:
        return book, _refusals(command.notify, request, why)
    try:
        scheduler = book.scheduler.enqueue(request, index)
    except ValueError as err:
        return book, _refusals(command.notify, request, str(err))
    return book.copy_with(scheduler=scheduler, notify={**book.notify, **command.notify}), []


def _cancel(book: FleetBook, request_id: str) -> FleetBook:
    queued = [r for r in book.scheduler.queue if r.request_id == request_id]
    grant = book.scheduler.grant(request_id)
    jobs = {n.job_id for r in queued for n in r.nodes} | {
        p.job_id for p in (grant.placements if grant else [])
    }
    return book.copy_with(
        scheduler=book.scheduler.cancel(request_id),
        notify={job: wid for job, wid in book.notify.items() if job not in jobs},
        told_queued=[r for r in book.told_queued if r != request_id],
    )


def _lost(book: FleetBook, change: InstanceChange) -> Step:
    slot = book.scheduler.instances.get(change.name)
    if slot is None or slot.status != InstanceStatus.READY:
        return book, []
    scheduler, jobs = book.scheduler.mark_unreachable(change.name)
    message = f"instance {change.name} is unreachable" + (f": {change.note}" if change.note else "")
    notices = [
        Notice(kind=NoticeKind.TERMINATE, job_id=job, workflow_id=book.notify[job], message=message)
        for job in jobs
        if job in book.notify
    ]
    lost = {**book.lost, change.name: sorted({*book.lost.get(change.name, []), *jobs})}
    return book.copy_with(scheduler=scheduler, lost=lost), notices


def _back(book: FleetBook, change: InstanceChange) -> Step:
    """A host deployed at last, back after it was lost (its lost jobs' tasks removed already), or described
    anew by its agent: started again, redeployed, or seen otherwise at a health check
    (docs/fleets.md#what-an-instance-is). Its jobs keep what they were given, but GPUs it no longer has:
    the jobs that held GPUs there end."""
    known = book.scheduler.instances.get(change.name)
    pending = {name: why for name, why in book.pending.items() if name != change.name}
    lost = {name: jobs for name, jobs in book.lost.items() if name != change.name}
    if book.deleting or (known is not None and known.status == InstanceStatus.DELETED):
        return book.copy_with(pending=pending), []
    scheduler, notices = book.scheduler, []
    if change.slot is not None:
        slot = change.slot.model_copy(update={"status": InstanceStatus.READY})
        scheduler = scheduler.add_instance(slot)
        notices = _gpus_gone(book, known, slot)
    elif known is not None:
        scheduler = scheduler.mark_ready(change.name)
    return book.copy_with(scheduler=scheduler, pending=pending, lost=lost), notices


def _gpus_gone(book: FleetBook, known: InstanceSlot | None, now: InstanceSlot) -> list[Notice]:
    """The jobs that hold GPUs on an instance that now has fewer than they hold, told to end: which of
    them lost theirs only the host knows, and none of them may go on thinking it has its GPUs."""
    if known is None or known.status != InstanceStatus.READY:
        return []  # back from unreachable: its jobs were ended when it was lost
    held = known.used()[1].gpu
    if held <= now.total.gpu:
        return []
    message = (
        f"instance {now.name} now has {now.total.gpu} GPU(s), fewer than its jobs held ({held}): "
        "the job's GPUs may be gone"
    )
    return [
        Notice(
            kind=NoticeKind.TERMINATE,
            job_id=job,
            workflow_id=book.notify[job],
            message=message,
            reason=JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY,
        )
        for job, allocation in sorted(known.allocations.items())
        if allocation.resources.gpu > 0 and job in book.notify
    ]


def _delete(book: FleetBook) -> Step:
    """No new placements; idle instances go now, busy ones once their jobs end; waiting replicas fail."""
    scheduler = book.scheduler
    for name in sorted(scheduler.instances):
        scheduler = scheduler.remove_instance(name)
    book = book.copy_with(scheduler=scheduler, deleting=True, pending={})
    notices: list[Notice] = []
    for request in book.scheduler.waiting():
        notices += _refusals(book.notify, request, f"fleet {book.name} is being deleted")
        book = _forget(book.copy_with(scheduler=book.scheduler.cancel(request.request_id)), request)
    return book, notices


def fleet_env(configuration: FleetConfiguration | None) -> dict[str, str]:
    """What the fleet's `env` gives each job placed on it (docs/fleets.md#env); bare names were resolved
    when it was applied (cli.fleet_api), one left over is left out."""
    env = {} if configuration is None else configuration.env
    return {key: value for key, value in env.items() if value is not None}


def schedule(book: FleetBook, tell_queued: bool = True) -> Step:
    """Grant what fits now (whole replicas, by priority), then tell the replicas that wait, once: unless
    `tell_queued` is False, where the fleet records its queue in the store instead (docs/fleets.md)."""
    if not book.deployed:
        return book, []
    requests = {r.request_id: r for r in book.scheduler.queue}
    scheduler, grants = book.scheduler.schedule()
    notices: list[Notice] = []
    for grant in grants:
        request = requests[grant.request_id]
        addresses = grant.addresses
        for placement in grant.placements:
            node = request.nodes[placement.node]
            cluster = ClusterInfo(
                node_rank=placement.node,
                nodes_num=len(request.nodes),
                master_node_ip=addresses[0],
                node_ips=addresses,
                gpus_per_node=node.resources.gpu,
                node_gpus=[n.resources.gpu for n in request.nodes],
            )
            notices.append(
                Notice(
                    kind=NoticeKind.PLACED,
                    job_id=placement.job_id,
                    workflow_id=book.notify[placement.job_id],
                    placement=Placement(
                        instance_name=placement.instance,
                        cluster=cluster,
                        shared=placement.shared,
                        env=book.env,
                    ),
                )
            )
    if not tell_queued:  # what a fleet begun before told is of no more use
        return book.copy_with(scheduler=scheduler, told_queued=[]), notices
    granted = {grant.request_id for grant in grants}
    told = [r for r in book.told_queued if r not in granted]
    known = set(told)  # a burst's queue is long: `in` on the list made each step quadratic
    for position, request in enumerate(scheduler.waiting(), start=1):
        if request.request_id not in known:
            told.append(request.request_id)
            notices += [
                Notice(
                    kind=NoticeKind.QUEUED,
                    job_id=n.job_id,
                    workflow_id=book.notify[n.job_id],
                    position=position,
                )
                for n in request.nodes
                if n.job_id in book.notify
            ]
    return book.copy_with(scheduler=scheduler, told_queued=told), notices


def undelivered(book: FleetBook, notice: Notice) -> FleetBook:
    """A notice whose JobWorkflow has ended: capacity granted to it comes back, a request it waits in goes."""
    if notice.kind == NoticeKind.PLACED:
        return apply(book, ReleaseJob(job_id=notice.job_id))[0]
    if notice.kind == NoticeKind.QUEUED:
        request = next(
            (r for r in book.scheduler.queue if any(n.job_id == notice.job_id for n in r.nodes)), None
        )
        if request is not None:
            return _cancel(book, request.request_id)
    return book
