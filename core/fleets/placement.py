"""Placement on a fleet's instances: their capacity in blocks, and where the nodes of a gang can go.

Pure and deterministic; `core.fleets.scheduling` builds the scheduler's queue and state on these. Blocks are
dstack's: an instance with N blocks is split into N equal shares of CPUs, memory and GPUs, and a job takes
the fewest whole blocks that cover its need (`ceil(max over resources of need / share)`, at least one), so
`blocks: 1` gives one job the whole instance (GPU shares round down when N does not divide the GPUs).
`blocks=None` is Ferry's shared mode (the local machine): a job takes exactly what it needs and jobs share
the instance while their sums fit.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from pydantic import Field

from core.configuration.gpus import GPU
from core.configuration.resources import known_arch
from core.fleets.matching import InstanceResources, privileged_shortfall, shortfalls
from core.wire.agent_api import BYTES_PER_GB, InstanceInfo, Resources
from core.wire.base import Frozen
from core.wire.job_messages import NodeRequest, PlacementRequest

EPS = 1e-9


class InstanceStatus(StrEnum):
    READY = "ready"
    UNREACHABLE = "unreachable"  # no new grants; its jobs are being failed
    DELETED = "deleted"  # no new grants; dropped once its last job is released


class Allocation(Frozen):
    request_id: str
    node: int = Field(ge=0, description="the job's node rank in its gang")
    resources: Resources = Field(description="reserved: whole blocks' worth, or the need in shared mode")
    blocks: int = Field(default=0, ge=0)


class InstanceSlot(Frozen):
    name: str
    address: str = Field(description="the IP the jobs on this instance are reached at by the other nodes")
    total: Resources
    blocks: int | None = Field(default=1, ge=1, description="None: shared by exact needs")
    fleet: str = ""
    hardware: InstanceResources | None = Field(default=None, description="for GPU names, CPU arch")
    container_engine: str | None = Field(default=None, description="as its agent reports it; None: none")
    agent_release: str | None = Field(default=None, description="the release of its agent; None: not known")
    status: InstanceStatus = InstanceStatus.READY
    allocations: dict[str, Allocation] = Field(default_factory=dict, description="by job id")

    def used(self) -> tuple[int, Resources]:
        """The blocks and resources its jobs hold. Summed once per allocations, and carried over from the
        slot before when a step adds or releases jobs (`with_allocations`, `without`): a fleet's instance
        may hold 10,000 jobs, and every step of the fleet asks (docs/scaling.md)."""
        known = self.__dict__.get(_USAGE)
        if known is not None and known[0] is self.allocations:
            return known[1], known[2]
        blocks, cpu, memory, gpu = 0, 0.0, 0.0, 0
        for allocation in self.allocations.values():
            blocks += allocation.blocks
            cpu += allocation.resources.cpu
            memory += allocation.resources.memory
            gpu += allocation.resources.gpu
        resources = Resources(cpu=cpu, memory=memory, gpu=gpu)
        self._know(blocks, resources)
        return blocks, resources

    def free(self) -> Resources:
        _, used = self.used()
        return Resources(
            cpu=max(0.0, self.total.cpu - used.cpu),
            memory=max(0.0, self.total.memory - used.memory),
            gpu=max(0, self.total.gpu - used.gpu),
        )

    def with_allocations(self, added: dict[str, Allocation]) -> InstanceSlot:
        """This slot with `added` allocated too; its usage is this one's plus theirs."""
        blocks, used = self.used()
        for allocation in added.values():
            blocks, used = blocks + allocation.blocks, _plus(used, allocation.resources, 1)
        slot = self.model_copy(update={"allocations": {**self.allocations, **added}})
        return slot._know(blocks, used)

    def without(self, job_id: str) -> InstanceSlot:
        """This slot with the job's allocation released; its usage is this one's less the job's."""
        blocks, used = self.used()
        left = dict(self.allocations)  # a copy in C, not a comprehension: releases come in bursts
        gone = left.pop(job_id)
        slot = self.model_copy(update={"allocations": left})
        return slot._know(blocks - gone.blocks, _plus(used, gone.resources, -1) if left else Resources())

    def described(self) -> str:
        """What the instance is, in one line: `cpu=8 mem=32GB disk=100GB gpu=2xT4:16GB, podman 4.3.1, agent
        0.25.0` (what is not known left out)."""
        words = [self.hardware.pretty()] if self.hardware is not None else []
        words += [self.container_engine] if self.container_engine else []
        words += [f"agent {self.agent_release}"] if self.agent_release else []
        return ", ".join(words)

    def description_key(self) -> str:
        """What the instance is, as its agent last described it (not its status, not its jobs), in a few
        characters: the health watch is told it and reports when the agent describes something else."""
        described = self.model_dump_json(include=_DESCRIPTION)
        return hashlib.sha256(described.encode()).hexdigest()[:16]

    def _know(self, blocks: int, used: Resources) -> InstanceSlot:
        # Kept beside the fields, not as one: pydantic neither serialises nor compares it, and a copy
        # with other allocations (`model_copy` copies it too) does not take it for its own (`used`).
        # A slot's usage depends only on how it was made, never on who asked first: replay-safe.
        self.__dict__[_USAGE] = (self.allocations, blocks, used)
        return self


_USAGE = "_ferry_usage"
_DESCRIPTION = {"address", "total", "blocks", "hardware", "container_engine", "agent_release"}


def _plus(a: Resources, b: Resources, sign: int) -> Resources:
    """a + sign * b, never below zero (a float sum less its parts may come out at -1e-17)."""
    return Resources(
        cpu=max(0.0, a.cpu + sign * b.cpu),
        memory=max(0.0, a.memory + sign * b.memory),
        gpu=max(0, a.gpu + sign * b.gpu),
    )


@dataclass(frozen=True)
class Room:
    """What is free on an instance while a schedule pass places requests."""

    blocks: int | None
    cpu: float
    memory: float
    gpu: int

    @classmethod
    def of(cls, slot: InstanceSlot, empty: bool = False) -> Room:
        free = slot.total if empty else slot.free()
        blocks = None if slot.blocks is None else slot.blocks - (0 if empty else slot.used()[0])
        return cls(blocks, free.cpu, free.memory, free.gpu)

    def holds(self, blocks: int, need: Resources) -> bool:
        if self.blocks is not None:
            return blocks <= self.blocks
        return need.cpu <= self.cpu + EPS and need.memory <= self.memory + EPS and need.gpu <= self.gpu

    def take(self, blocks: int, need: Resources) -> Room:
        left = None if self.blocks is None else self.blocks - blocks
        return Room(left, self.cpu - need.cpu, self.memory - need.memory, self.gpu - need.gpu)

    def tightness(self, blocks: int, need: Resources) -> tuple[float, ...]:
        left = self.take(blocks, need)
        return (left.blocks or 0, left.gpu, left.cpu, left.memory)


def node_cost(slot: InstanceSlot, node: NodeRequest) -> tuple[int, Resources] | list[str]:
    """(blocks, reserved resources) for `node` on `slot` when empty, or why it can never fit there."""
    if node.instance is not None and node.instance != slot.name:
        return [f"its volumes are on instance {node.instance}"]
    if node.picks and not any(pick.picks(slot.name, slot.address, slot.fleet) for pick in node.picks):
        return [f"not one of the run's `instances` ({', '.join(pick.shown() for pick in node.picks)})"]
    reasons = []
    if node.container and slot.container_engine is None:
        reasons.append("needs a container engine (image or python), instance has none")
    spec: dict[str, str] = {}  # the spec's reasons by resource: the amounts below do not repeat them
    # An instance not yet described (one an elastic fleet is to make) is matched once its agent describes it.
    if node.spec is not None and slot.hardware is not None:
        spec = shortfalls(slot.hardware, node.spec, check_max=False, host=not node.container)
    reasons += spec.values()
    # `privileged: true` on the host: only where the agent runs as root (docs/containers.md#privileged).
    if node.privileged and not node.container and slot.hardware is not None:
        reasons += filter(None, [privileged_shortfall(slot.hardware)])
    need, total = node.resources, slot.total
    amounts = (("cpu", "CPUs", need.cpu, total.cpu), ("memory", "GB of memory", need.memory, total.memory))
    for resource, what, want, have in (*amounts, ("gpu", "GPUs", need.gpu, total.gpu)):
        if want > have + EPS and resource not in spec:
            reasons.append(f"needs {want:g} {what}, instance has {have:g}")
    if reasons:
        return reasons
    if slot.blocks is None:
        return 0, need
    blocks = 1
    for want, have in ((need.cpu, total.cpu), (need.memory, total.memory), (need.gpu, total.gpu)):
        if want > EPS:
            blocks = max(blocks, math.ceil(want * slot.blocks / have - EPS))
    if blocks > slot.blocks:  # rounding of a share can only add a block when the need is at the total
        blocks = slot.blocks
    if blocks == slot.blocks:
        return blocks, total
    share = blocks / slot.blocks
    return blocks, Resources(
        cpu=total.cpu * share, memory=total.memory * share, gpu=total.gpu * blocks // slot.blocks
    )


Assignment = list[tuple[int, str, int, Resources]]  # (node index, instance, blocks, reserved)


def place(request: PlacementRequest, slots: list[InstanceSlot], rooms: dict[str, Room]) -> Assignment | None:
    """Where each node of `request` goes among `slots`, given what is free in `rooms`; None if not all fit."""
    costs: list[dict[str, tuple[int, Resources]]] = []
    for node in request.nodes:
        fits = {}
        for slot in slots:
            cost = node_cost(slot, node)
            if isinstance(cost, tuple) and rooms[slot.name].holds(*cost):
                fits[slot.name] = cost
        costs.append(fits)
    if request.spread and len(request.nodes) > 1:
        return _match(costs, rooms)
    sizes = [(n.resources.gpu, n.resources.cpu, n.resources.memory) for n in request.nodes]
    return _pack(
        costs, rooms, sorted(range(len(sizes)), key=lambda i: (-sizes[i][0], -sizes[i][1], -sizes[i][2], i))
    )


def _match(costs: list[dict[str, tuple[int, Resources]]], rooms: dict[str, Room]) -> Assignment | None:
    """A node per distinct instance (Kuhn's augmenting paths), each trying its tightest fits first."""

    def by_fit(fits: dict[str, tuple[int, Resources]]) -> list[str]:
        return sorted(fits, key=lambda name: (rooms[name].tightness(*fits[name]), name))

    order = [by_fit(fits) for fits in costs]
    holder: dict[str, int] = {}

    def augment(node: int, seen: set[str]) -> bool:
        for name in order[node]:
            if name not in seen:
                seen.add(name)
                if name not in holder or augment(holder[name], seen):
                    holder[name] = node
                    return True
        return False

    for node in range(len(costs)):
        if not augment(node, set()):
            return None
    return sorted((node, name, *costs[node][name]) for name, node in holder.items())


def _pack(
    costs: list[dict[str, tuple[int, Resources]]], rooms: dict[str, Room], order: list[int]
) -> Assignment | None:
    """Nodes may share an instance: the biggest first, each on an unused instance if it can, tightest fit."""
    rooms = dict(rooms)
    used: set[str] = set()
    result: Assignment = []
    for node in order:
        fits = [name for name, cost in costs[node].items() if rooms[name].holds(*cost)]
        if not fits:
            return None
        name = min(fits, key=lambda n: (n in used, rooms[n].tightness(*costs[node][n]), n))
        rooms[name] = rooms[name].take(*costs[node][name])
        used.add(name)
        result.append((node, name, *costs[node][name]))
    return sorted(result)


def resolve_blocks(blocks: int | Literal["auto"], total: Resources) -> int:
    """A fleet's `blocks` for one instance: `auto` is one block per GPU, or per whole CPU without GPUs."""
    if blocks == "auto":
        return total.gpu if total.gpu > 0 else max(1, int(total.cpu))
    return blocks


def hardware_from_info(info: InstanceInfo) -> InstanceResources:
    """What an agent reports about its host, as resource specs are matched against. An agent of 0.1.0
    reports no CPU architecture, nor does one on another than x86 or arm: unknown (docs/fleets.md)."""
    gpus = [GPU.from_driver(gpu.name, gpu.memory_mib, index=gpu.index) for gpu in info.gpus]
    return InstanceResources(
        cpus=info.cpus,
        memory_gb=info.memory_bytes / BYTES_PER_GB,
        disk_gb=info.disk_total_bytes / BYTES_PER_GB,
        gpus=gpus,
        cpu_arch=known_arch(info.cpu_arch),
        shm_gb=None if info.shm_bytes is None else info.shm_bytes / BYTES_PER_GB,
        agent_uid=info.agent_uid,
    )


def slot_from_info(
    name: str,
    address: str,
    info: InstanceInfo,
    blocks: int | Literal["auto"] | None = 1,
    fleet: str = "",
    agent_release: str | None = None,
) -> InstanceSlot:
    """An instance as its agent describes it: the agent's total, the host's hardware, the fleet's blocks."""
    resolved = None if blocks is None else resolve_blocks(blocks, info.total)
    return InstanceSlot(
        name=name,
        address=address,
        total=info.total,
        blocks=resolved,
        fleet=fleet,
        hardware=hardware_from_info(info),
        container_engine=info.container_engine,
        agent_release=agent_release,
    )
