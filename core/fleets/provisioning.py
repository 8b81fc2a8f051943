"""An elastic fleet's decisions, pure (docs/backends.md#elastic-fleets): when to create instances, when to
release them, and what a backend's news about them means for the book.

A fleet with `nodes: MIN..MAX` creates its instances through its backend, a group at a time: one group is
one creation (a Slurm allocation of N nodes, each node an instance), made for a replica that fits no
instance the fleet has (a gang of N nodes gets one group of N), or to keep MIN. A group is recorded in the
book before the backend is asked (`SUBMITTING`), so a worker that dies mid-call finds it again by its name
and never creates it twice. A group whose instances have all been idle for `idle_duration` is released
while the fleet keeps at least MIN.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from core.configuration.fleet import FleetConfiguration
from core.fleets.placement import InstanceSlot, InstanceStatus
from core.fleets.scheduling import SchedulerState
from core.wire.agent_api import Resources
from core.wire.base import Frozen
from core.wire.job_messages import PlacementRequest

DEFAULT_IDLE_DURATION = 300  # seconds; dstack's fleets keep an idle instance 5 minutes by default too


class GroupPhase(StrEnum):
    SUBMITTING = "submitting"  # recorded; the backend not yet known to have it
    WAITING = "waiting"  # the backend holds it (Slurm: PENDING, with a reason)
    STARTING = "starting"  # the backend gave it; its agents are being reached
    READY = "ready"  # its instances are the scheduler's
    RELEASING = "releasing"  # given back (scancel); gone once the backend says so


class InstanceGroup(Frozen):
    """One creation by the backend: its nodes are instances `<fleet>-<name>-<k>`."""

    name: str  # g1, g2 ...: unique in the fleet
    nodes: int = Field(ge=1)
    phase: GroupPhase = GroupPhase.SUBMITTING
    for_request: str | None = Field(default=None, description="the replica it was made for; None: MIN")
    backend_id: str | None = Field(default=None, description="the backend's id of it (a Slurm job id)")
    reason: str | None = Field(default=None, description="why the backend holds it, in its words")
    instances: list[str] = Field(default_factory=list)
    since: float = 0.0  # when it entered its phase
    unreachable: bool = Field(default=False, description="its backend's login node does not answer")


class ElasticSpec(Frozen):
    """What the fleet's configuration says of its size and its instances' shape."""

    min: int = Field(ge=0)
    max: int = Field(ge=1)
    shape: Resources  # what each new instance has: the fleet's `resources`, their lower bounds
    idle_duration: float = DEFAULT_IDLE_DURATION


class Provisioning(Frozen):
    spec: ElasticSpec
    groups: dict[str, InstanceGroup] = Field(default_factory=dict)
    made: int = 0  # groups named so far
    idle_since: dict[str, float] = Field(default_factory=dict, description="instance -> idle since")
    refused: str | None = Field(default=None, description="the backend's last refusal, for `fleet list`")
    # `nodes.target`, until the first plan has asked for that many: a fleet starts with TARGET instances
    # and keeps MIN (docs/backends.md#elastic-fleets); 0 once asked for, or for a fleet begun before it.
    initial: int = Field(default=0, ge=0)

    def counted_nodes(self) -> int:
        """The instances the fleet has or has asked for (MAX counts these)."""
        return sum(g.nodes for g in self.groups.values() if g.phase != GroupPhase.RELEASING)

    def instance_group(self, instance: str) -> InstanceGroup | None:
        return next((g for g in self.groups.values() if instance in g.instances), None)

    def with_group(self, group: InstanceGroup) -> Provisioning:
        return self.model_copy(update={"groups": {**self.groups, group.name: group}})

    def without_group(self, name: str) -> Provisioning:
        return self.model_copy(update={"groups": {k: g for k, g in self.groups.items() if k != name}})


def group_instances(fleet: str, group: str, nodes: int) -> list[str]:
    return [f"{fleet}-{group}-{k}" for k in range(nodes)]


def shape_slots(spec: ElasticSpec, fleet: str, count: int) -> list[InstanceSlot]:
    """Instances as a new group would make them, for checking what could ever fit."""
    return [
        InstanceSlot(name=f"{fleet}-new-{k}", address="", total=spec.shape, fleet=fleet) for k in range(count)
    ]


def never_fits(
    scheduler: SchedulerState, spec: ElasticSpec, request: PlacementRequest, fleet: str
) -> str | None:
    """Why neither the fleet's instances nor any it could create could ever hold the replica; None if
    some could. New instances have the fleet's `resources`, as many as MAX allows for one gang."""
    if scheduler.never_fits(request, fleet) is None:
        return None
    nodes = len(request.nodes)
    if nodes > spec.max:
        return f"fleet {fleet} has at most {spec.max} instance(s) (`nodes`), and the replica needs {nodes}"
    phantom = SchedulerState()
    for slot in shape_slots(spec, fleet, nodes):
        phantom = phantom.add_instance(slot)
    why = phantom.never_fits(request, fleet)
    if why is None:
        return None
    shape = spec.shape
    return (
        f"{why} (the instances fleet {fleet} creates have cpu={shape.cpu:g} mem={shape.memory:g}GB "
        f"gpu={shape.gpu}: its `resources`)"
    )


class Create(Frozen):
    group: InstanceGroup


class Release(Frozen):
    group: InstanceGroup
    why: str


ProvisioningEffect = Create | Release


def plan(
    provisioning: Provisioning, scheduler: SchedulerState, fleet: str, now: float, *, deleting: bool = False
) -> tuple[Provisioning, list[ProvisioningEffect]]:
    """What to create and release now: a group for each waiting replica that has none, within MAX; MIN
    kept (TARGET at the first plan); groups idle for `idle_duration` released (all of them once the fleet
    is deleted)."""
    effects: list[ProvisioningEffect] = []
    provisioning = _idle_times(provisioning, scheduler, now)
    if deleting:
        for group in sorted(provisioning.groups.values(), key=lambda g: g.name):
            if group.phase != GroupPhase.RELEASING and _all_idle(group, scheduler):
                provisioning, released = _release(provisioning, group, f"fleet {fleet} is deleted", now)
                effects.append(released)
        return provisioning, effects
    served = {g.for_request for g in provisioning.groups.values() if g.phase != GroupPhase.READY}
    waiting = [r for r in scheduler.waiting() if r.request_id not in served]
    for request in waiting:
        if provisioning.counted_nodes() + len(request.nodes) > provisioning.spec.max:
            break  # the queue's order holds: a later, smaller replica does not overtake it
        provisioning, created = _create(provisioning, fleet, len(request.nodes), request.request_id, now)
        effects.append(created)
    while provisioning.counted_nodes() < max(provisioning.spec.min, provisioning.initial):
        provisioning, created = _create(provisioning, fleet, 1, None, now)
        effects.append(created)
    if provisioning.initial:  # asked for: from now on MIN is kept, and the rest goes once idle
        provisioning = provisioning.model_copy(update={"initial": 0})
    for group in sorted(provisioning.groups.values(), key=lambda g: g.name):
        if group.phase != GroupPhase.READY or not _all_idle(group, scheduler):
            continue
        idle_for = now - max(provisioning.idle_since.get(i, now) for i in group.instances)
        keeps_min = provisioning.counted_nodes() - group.nodes >= provisioning.spec.min
        if idle_for >= provisioning.spec.idle_duration and keeps_min:
            why = f"idle for {int(idle_for)}s (idle_duration {int(provisioning.spec.idle_duration)}s)"
            provisioning, effect = _release(provisioning, group, why, now)
            effects.append(effect)
    return provisioning, effects


def next_release_at(provisioning: Provisioning, scheduler: SchedulerState) -> float | None:
    """When the first idle group is due for release (the workflow's timer); None when none is idle."""
    times = [
        max(provisioning.idle_since.get(i, 0.0) for i in g.instances) + provisioning.spec.idle_duration
        for g in provisioning.groups.values()
        if g.phase == GroupPhase.READY and _all_idle(g, scheduler) and g.instances
    ]
    return min(times) if times else None


def _all_idle(group: InstanceGroup, scheduler: SchedulerState) -> bool:
    slots = [scheduler.instances.get(name) for name in group.instances]
    return all(slot is None or not slot.allocations for slot in slots)


def _idle_times(provisioning: Provisioning, scheduler: SchedulerState, now: float) -> Provisioning:
    idle = dict(provisioning.idle_since)
    for name, slot in scheduler.instances.items():
        if slot.allocations or slot.status != InstanceStatus.READY:
            idle.pop(name, None)
        else:
            idle.setdefault(name, now)
    idle = {name: t for name, t in idle.items() if name in scheduler.instances}
    return (
        provisioning.model_copy(update={"idle_since": idle})
        if idle != provisioning.idle_since
        else provisioning
    )


def _create(
    provisioning: Provisioning, fleet: str, nodes: int, request_id: str | None, now: float
) -> tuple[Provisioning, Create]:
    made = provisioning.made + 1
    name = f"g{made}"
    group = InstanceGroup(
        name=name,
        nodes=nodes,
        for_request=request_id,
        instances=group_instances(fleet, name, nodes),
        since=now,
    )
    provisioning = provisioning.with_group(group).model_copy(update={"made": made})
    return provisioning, Create(group=group)


def _release(
    provisioning: Provisioning, group: InstanceGroup, why: str, now: float
) -> tuple[Provisioning, Release]:
    releasing = group.model_copy(update={"phase": GroupPhase.RELEASING, "since": now})
    return provisioning.with_group(releasing), Release(group=releasing, why=why)


UNBOUNDED_NODES = 1000  # `nodes: 0..`: as many as the backend gives, counted against this


def elastic_spec(configuration: FleetConfiguration) -> ElasticSpec | None:
    """The spec of a fleet with `nodes`; None for an SSH fleet."""
    nodes = configuration.nodes
    if nodes is None:
        return None
    resources = configuration.resources
    gpu = resources.gpu
    shape = Resources(
        cpu=resources.cpu.min or 1,
        memory=resources.memory.min or 0,
        gpu=0 if gpu is None else gpu.count.min or 0,
    )
    idle = configuration.idle_duration
    return ElasticSpec(
        min=nodes.min,
        max=nodes.max or UNBOUNDED_NODES,
        shape=shape,
        idle_duration=DEFAULT_IDLE_DURATION if idle is None else idle,
    )
