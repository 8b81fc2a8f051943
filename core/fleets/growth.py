"""An elastic fleet's book and its backend's news, pure (docs/backends.md#elastic-fleets).

The FleetWorkflow of a fleet with `nodes` asks `plan_step` what to create and release after each step,
and applies what its backend's activities report (`GroupNews`) with `apply_news`: a group held (Slurm's
pending reason), given (its agents reached: its instances join the scheduler), refused (its replica
fails with the backend's reason), or ended (its instances' jobs told to end: an interruption, which
`retry.on_events: [interruption]` retries, or a loss).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from core.configuration.fields import SpotPolicy
from core.configuration.resources import ResourcesSpec
from core.fleets.book import FleetBook, Step, _cancel, _refusals
from core.fleets.messages import Notice, NoticeKind
from core.fleets.placement import InstanceSlot, InstanceStatus
from core.fleets.provisioning import GroupPhase, InstanceGroup, ProvisioningEffect, Release, plan
from core.status import JobTerminationReason
from core.wire.base import Frozen


class GroupNews(Frozen):
    """What a backend's activity reports of one group."""

    group: str
    state: Literal[
        "submitted", "waiting", "running", "ready", "refused", "ended", "released", "unreachable", "reachable"
    ]
    backend_id: str | None = None
    reason: str | None = None  # waiting: why (Slurm's pending reason); refused, ended: what happened
    slots: list[InstanceSlot] = Field(default_factory=list)  # ready: its instances
    interrupted: bool = False  # ended by a preemption, its time limit or a node's failure


def plan_step(book: FleetBook, now: float) -> tuple[FleetBook, list[ProvisioningEffect]]:
    if book.provisioning is None:
        return book, []
    provisioning, effects = plan(book.provisioning, book.scheduler, book.name, now, deleting=book.deleting)
    scheduler = book.scheduler
    for effect in effects:
        if isinstance(effect, Release):  # idle: they take no more jobs, and go from the fleet at once
            for name in effect.group.instances:
                scheduler = scheduler.remove_instance(name)
    return book.copy_with(provisioning=provisioning, scheduler=scheduler), effects


def apply_news(book: FleetBook, news: GroupNews, now: float) -> Step:
    provisioning = book.provisioning
    group = None if provisioning is None else provisioning.groups.get(news.group)
    if provisioning is None or group is None:
        return book, []
    if news.state in ("unreachable", "reachable"):
        return _reachability(book, group, news), []
    if news.state in ("submitted", "waiting", "running"):
        phase = {
            "submitted": GroupPhase.WAITING,
            "waiting": GroupPhase.WAITING,
            "running": GroupPhase.STARTING,
        }
        keep = group.phase in (GroupPhase.RELEASING, GroupPhase.READY)
        update: dict[str, object] = {
            "backend_id": news.backend_id or group.backend_id,
            "reason": news.reason if news.state == "waiting" else None,
        }
        if not keep and group.phase != phase[news.state]:
            update |= {"phase": phase[news.state], "since": now}
        return book.copy_with(provisioning=provisioning.with_group(group.model_copy(update=update))), []
    if news.state == "ready":
        if group.phase == GroupPhase.RELEASING:
            return book, []
        scheduler = book.scheduler
        for slot in news.slots:
            scheduler = scheduler.add_instance(slot.model_copy(update={"status": InstanceStatus.READY}))
        ready = group.model_copy(update={"phase": GroupPhase.READY, "since": now, "reason": None})
        return book.copy_with(scheduler=scheduler, provisioning=provisioning.with_group(ready)), []
    if news.state == "released":
        return book.copy_with(provisioning=provisioning.without_group(group.name)), []
    # Refused or ended: gone for the fleet, and given back (its Slurm job cancelled, its directory removed).
    releasing = group.model_copy(update={"phase": GroupPhase.RELEASING, "since": now, "reason": news.reason})
    if news.state == "refused" and group.backend_id is None and news.backend_id is None:
        provisioning = provisioning.without_group(group.name)  # Slurm never had it
    elif group.phase != GroupPhase.RELEASING:
        provisioning = provisioning.with_group(releasing)
    book = book.copy_with(provisioning=provisioning)
    notices: list[Notice] = []
    if news.state == "refused":
        book = book.copy_with(provisioning=provisioning.model_copy(update={"refused": news.reason}))
        request = next((r for r in book.scheduler.queue if r.request_id == group.for_request), None)
        if request is not None:
            notices += _refusals(book.notify, request, news.reason or "the backend refused it")
            book = _cancel(book, request.request_id)
        return book, notices
    reason = (
        JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY
        if news.interrupted
        else JobTerminationReason.INSTANCE_UNREACHABLE
    )
    scheduler = book.scheduler
    for name in group.instances:
        held = scheduler.instances.get(name)
        if held is None:
            continue
        notices += [
            Notice(
                kind=NoticeKind.TERMINATE,
                job_id=job,
                workflow_id=book.notify[job],
                message=f"instance {name}: {news.reason}" if news.reason else f"instance {name} is gone",
                reason=reason,
                instance_gone=True,
            )
            for job in sorted(held.allocations)
            if job in book.notify
        ]
        scheduler = scheduler.remove_instance(name)
    return book.copy_with(scheduler=scheduler), notices


def _reachability(book: FleetBook, group: InstanceGroup, news: GroupNews) -> FleetBook:
    """The backend's login node lost or back: its instances take no new jobs meanwhile. Their jobs run on
    (Slurm still runs the allocation), and are told nothing: the allocation's end, if it comes, is heard
    once the login node answers again (docs/backends.md#elastic-fleets)."""
    if group.phase != GroupPhase.READY:
        return book
    assert book.provisioning is not None
    lost = news.state == "unreachable"
    scheduler = book.scheduler
    for name in group.instances:
        scheduler = scheduler.mark_unreachable(name)[0] if lost else scheduler.mark_ready(name)
    update = {"unreachable": lost, "reason": news.reason if lost else None}
    provisioning = book.provisioning.with_group(group.model_copy(update=update))
    return book.copy_with(scheduler=scheduler, provisioning=provisioning)


# --- what the workflow asks the backend's activities (activities/provisioning.py) --------------------------


class GroupCall(Frozen):
    """Which backend, for which fleet's group."""

    project: str
    fleet: str
    backend: str
    group: str
    job_name: str  # the name the backend knows it by (core.backends.slurm.job_name)


class CreateGroup(GroupCall):
    nodes: int
    resources: ResourcesSpec
    spot_policy: SpotPolicy | None = None


class StartGroup(GroupCall):
    backend_id: str
    instances: list[str]
    blocks: int | Literal["auto"] = 1


class WatchGroups(Frozen):
    project: str
    fleet: str
    backend: str
    # group -> (job name, what the fleet knows of it: news.state and reason)
    groups: dict[str, tuple[str, str]]
