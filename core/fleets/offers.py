"""`ferry offer` (docs/cli.md#offer): which instances of a fleet could run a replica now, which only once
others' jobs end, which never, and why. Read from the fleet scheduler's own state (a query of its
workflow), with the rules it places by (core/fleets/placement.py), so that the answer is what a run
submitted now would meet.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from core.fleets.placement import InstanceSlot, InstanceStatus, Room, node_cost
from core.fleets.scheduling import SchedulerState
from core.wire.base import Frozen
from core.wire.job_messages import PlacementRequest


class Fit(StrEnum):
    NOW = "now"  # a node of the replica fits in what is free
    WHEN_FREE = "when free"  # it fits the empty instance: once jobs there end
    NEVER = "never"  # no node of the replica ever fits it: the reasons say why


class InstanceOffer(Frozen):
    instance: str
    status: str
    fit: Fit
    nodes: list[int] = Field(description="the replica's nodes (job numbers) that fit it as `fit` says")
    reasons: list[str] = Field(default_factory=list, description="why not now, or why never")
    described: str = Field(default="", description="what it is, as its agent last described it")


class BackendOffer(Frozen):
    """What a fleet's backend could give for one more instance (a Slurm partition), asked of it now."""

    backend: str
    partition: str
    preemptible: bool
    fit: Fit
    reasons: list[str] = Field(default_factory=list, description="when it would start, or why never")


class FleetOffer(Frozen):
    fleet: str
    instances: list[InstanceOffer]
    starts_now: bool = Field(description="the scheduler would grant the whole replica at once")
    never: str | None = Field(default=None, description="why it can never run here; None if it can")
    backend: list[BackendOffer] = Field(
        default_factory=list,
        description="a fleet with `nodes`: what its backend could give (docs/backends.md)",
    )


def offer(fleet: str, state: SchedulerState, request: PlacementRequest) -> FleetOffer:
    """The fleet's answer to `request` (one replica's nodes), by the scheduler's own rules: granted at once
    if its queue and what is free let it (priorities and a blocked gang ahead included), else it waits."""
    _, grants = state.enqueue(request).schedule()
    slots = sorted(
        (slot for slot in state.instances.values() if slot.status != InstanceStatus.DELETED),
        key=lambda slot: slot.name,
    )
    return FleetOffer(
        fleet=fleet,
        instances=[_instance_offer(slot, request) for slot in slots],
        starts_now=any(grant.request_id == request.request_id for grant in grants),
        never=state.never_fits(request, fleet),
    )


def _instance_offer(slot: InstanceSlot, request: PlacementRequest) -> InstanceOffer:
    return _fit(slot, request).model_copy(update={"described": slot.described()})


def _fit(slot: InstanceSlot, request: PlacementRequest) -> InstanceOffer:
    fits_empty: list[int] = []
    fits_now: list[int] = []
    never: list[str] = []
    room = Room.of(slot)
    for index, node in enumerate(request.nodes):
        cost = node_cost(slot, node)
        if isinstance(cost, list):
            never += [reason for reason in cost if reason not in never]
            continue
        fits_empty.append(index)
        blocks, need = cost
        if slot.status == InstanceStatus.READY and room.holds(blocks, need):
            fits_now.append(index)
    if not fits_empty:
        return InstanceOffer(instance=slot.name, status=slot.status, fit=Fit.NEVER, nodes=[], reasons=never)
    if fits_now:
        return InstanceOffer(instance=slot.name, status=slot.status, fit=Fit.NOW, nodes=fits_now)
    return InstanceOffer(
        instance=slot.name, status=slot.status, fit=Fit.WHEN_FREE, nodes=fits_empty, reasons=[_busy(slot)]
    )


def _busy(slot: InstanceSlot) -> str:
    if slot.status != InstanceStatus.READY:
        return f"instance is {slot.status}"
    blocks, used = slot.used()
    held = f"{len(slot.allocations)} job(s) hold "
    if slot.blocks is not None:
        return held + f"{blocks} of its {slot.blocks} blocks"
    free = slot.free()
    return (
        held
        + f"{used.cpu:g} CPUs, {used.memory:.1f}GB, {used.gpu} GPUs; free: {free.cpu:g} CPUs, "
        + (f"{free.memory:.1f}GB, {free.gpu} GPUs")
    )
