"""The fleet scheduler's state and decisions: pure, deterministic, no I/O (docs/fleets.md).

`SchedulerState` is a frozen pydantic model and every operation returns a NEW state, leaving the old one as
it was: an entity workflow keeps `self.state = self.state.enqueue(request)`, serialises it whole, and hands
it to continue-as-new. Decisions depend on the state alone (instances are visited by name, requests by
priority then submission order), so replaying a workflow makes the same grants.

- **Capacity.** An instance has a total (CPUs, memory GB, GPUs) and dstack's `blocks` (see
core.fleets.placement):
  a job takes whole blocks, so `blocks: 1` gives one job the whole instance; `blocks=None` shares it by exact
  needs (the local machine). A node's `spec`, when given, must also match the instance's hardware (GPU
  names and memory, CPU architecture; lower bounds only, as instances are shared).
- **Gangs.** A `PlacementRequest` is one replica: all its nodes are granted at once or none is. With
  `spread` (the default) every node goes to a different instance, since multi-node tasks expect distinct
  hosts (their own address, the whole host network); the assignment is a bipartite matching, so it finds one
  whenever one exists. Without `spread` nodes may share an instance (best fit, distinct instances first).
  Each node goes to the instance it fits most tightly.
- **Priority.** Requests are served by (-priority, seq). A request that cannot be placed blocks every
  instance it could ever use (ready or not, when empty): requests behind it are placed only on instances it
  could never use, so a lower priority never takes capacity a waiting higher one could take, yet a CPU job
  is not held up by a GPU job waiting for a GPU host.
- **Lost hosts.** `mark_unreachable` stops new grants on an instance and names the jobs placed there (the
  caller fails them); their capacity stays held until each job is released, so `release` is the only way
  capacity comes back and nothing is freed twice.
- `never_fits` is the placement itself tried on every non-deleted instance, empty: a request it accepts is
  placed once enough is released, so nothing waits forever for a fit that no instance has.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import Field

from core.fleets.never_fits import arch_never_fits, explain_never_fits
from core.fleets.placement import (
    EPS,
    Allocation,
    Frozen,
    InstanceSlot,
    InstanceStatus,
    NodeRequest,
    PlacementRequest,
    Room,
    hardware_from_info,
    node_cost,
    place,
    resolve_blocks,
    slot_from_info,
)
from core.fleets.queue_index import QueueIndex
from core.wire.agent_api import Resources

__all__ = [
    "Allocation",
    "Grant",
    "InstanceCapacity",
    "InstanceSlot",
    "InstanceStatus",
    "NodePlacement",
    "NodeRequest",
    "PlacementRequest",
    "QueueIndex",
    "SchedulerState",
    "hardware_from_info",
    "resolve_blocks",
    "slot_from_info",
]


class NodePlacement(Frozen):
    job_id: str
    node: int
    instance: str
    address: str
    resources: Resources
    blocks: int
    # Other jobs may run beside it on the instance: a container gets a bridge (docs/containers.md#networks).
    shared: bool = False


class Grant(Frozen):
    request_id: str
    placements: list[NodePlacement] = Field(description="in node order: the master first")

    @property
    def addresses(self) -> list[str]:
        return [placement.address for placement in self.placements]


class InstanceCapacity(Frozen):
    name: str
    fleet: str
    status: InstanceStatus
    address: str
    total: Resources
    blocks: int | None
    busy_blocks: int
    free_blocks: int | None
    free: Resources
    jobs: list[str]
    used: Resources = Field(default_factory=Resources, description="what its jobs hold: `ferry fleet list`")


class SchedulerState(Frozen):
    instances: dict[str, InstanceSlot] = Field(default_factory=dict)
    queue: list[PlacementRequest] = Field(default_factory=list, description="waiting, in submission order")
    next_seq: int = 0

    # --- reading -------------------------------------------------------------------------------------------

    def waiting(self) -> list[PlacementRequest]:
        """The queue in the order it is served: priority first, then submission order."""
        return sorted(self.queue, key=lambda request: (-request.priority, request.seq))

    def queue_position(self, request_id: str) -> int | None:
        """1 for the request served next; None when it is not waiting."""
        ids = [request.request_id for request in self.waiting()]
        return ids.index(request_id) + 1 if request_id in ids else None

    def grant(self, request_id: str, job_ids: Iterable[str] | None = None) -> Grant | None:
        """The placements of a granted request still held (all its nodes until they are released).
        `job_ids`, the request's jobs where the caller knows them, are looked up rather than searched
        for among every allocation: a fleet's step costs what it hears, not its whole book."""
        slots = self._slots()
        if job_ids is None:
            held = [(slot, job, a) for slot in slots for job, a in slot.allocations.items()]
        else:
            held = [
                (slot, job, slot.allocations[job])
                for job in job_ids
                for slot in slots
                if job in slot.allocations
            ]
        placements = [
            NodePlacement(
                job_id=job,
                node=a.node,
                instance=slot.name,
                address=slot.address,
                resources=a.resources,
                blocks=a.blocks,
                shared=slot.blocks is None or a.blocks < slot.blocks,
            )
            for slot, job, a in held
            if a.request_id == request_id
        ]
        return (
            Grant(request_id=request_id, placements=sorted(placements, key=lambda p: p.node))
            if placements
            else None
        )

    def knows(self, request: PlacementRequest, index: QueueIndex | None = None) -> bool:
        """Whether the request is queued or granted already (`index`: the step's, if it keeps one)."""
        if request.request_id in (index or QueueIndex()).of(self.queue).requests:
            return True
        return self.grant(request.request_id, [node.job_id for node in request.nodes]) is not None

    def job_instance(self, job_id: str) -> str | None:
        return next((slot.name for slot in self._slots() if job_id in slot.allocations), None)

    def capacity(self) -> list[InstanceCapacity]:
        """Per instance: busy and free blocks, free resources, the jobs placed there (`ferry fleet list`)."""
        rows = []
        for slot in self._slots():
            busy, used = slot.used()
            free_blocks = None if slot.blocks is None else slot.blocks - busy
            rows.append(
                InstanceCapacity(
                    name=slot.name,
                    fleet=slot.fleet,
                    status=slot.status,
                    address=slot.address,
                    total=slot.total,
                    blocks=slot.blocks,
                    busy_blocks=busy,
                    free_blocks=free_blocks,
                    free=slot.free(),
                    jobs=sorted(slot.allocations),
                    used=used,
                )
            )
        return rows

    def idle(self) -> bool:
        """Nothing allocated anywhere and nothing waiting."""
        return not self.queue and all(not slot.allocations for slot in self.instances.values())

    def never_fits(self, request: PlacementRequest, fleet: str | None = None) -> str | None:
        """Why no instance, even empty, could ever hold the gang (FAILED_TO_START_DUE_TO_NO_CAPACITY), as
        one line naming `fleet` (else the request's `fleets`); None when it fits once enough is free."""
        slots = [slot for slot in self._candidates(request) if slot.status != InstanceStatus.DELETED]
        names = [fleet] if fleet is not None else request.fleets or []
        whose = f"fleet {names[0]}" if len(names) == 1 else f"fleets {', '.join(names)}" if names else ""
        if not slots:
            return f"{whose or 'the fleet'} {'have' if len(names) > 1 else 'has'} no instance"
        if place(request, slots, {slot.name: Room.of(slot, empty=True) for slot in slots}) is not None:
            return None
        for rank, node in enumerate(request.nodes):
            costs = {slot.name: node_cost(slot, node) for slot in slots}
            why = {name: cost for name, cost in costs.items() if isinstance(cost, list)}
            if len(why) == len(costs):
                if (arch := arch_never_fits(node, slots, whose)) is not None:
                    return arch
                what = "it" if len(request.nodes) == 1 else f"node {rank}"
                return (
                    f"no instance{f' of {whose}' if whose else ''} can run {what}: {explain_never_fits(why)}"
                )
        gang = f"{whose or 'the fleet'} cannot run it: its {len(request.nodes)} nodes"
        if request.spread:
            return f"{gang} need distinct instances, {len(slots)} could hold them"
        return f"{gang} do not fit together on its {len(slots)} instance(s)"

    def unplaceable(self, fleet: str | None = None) -> dict[str, str]:
        """Waiting requests that can no longer ever be placed (after instances were removed), with why."""
        reasons = {request.request_id: self.never_fits(request, fleet) for request in self.waiting()}
        return {request_id: reason for request_id, reason in reasons.items() if reason is not None}

    def check(self) -> list[str]:
        """Broken invariants, if any: an over-committed instance, a job placed twice or queued and placed."""
        problems, seen = [], set()
        for slot in self._slots():
            busy, used = slot.used()
            if slot.blocks is not None and busy > slot.blocks:
                problems.append(f"{slot.name}: {busy} blocks allocated of {slot.blocks}")
            for what, have, total in (
                ("cpu", used.cpu, slot.total.cpu),
                ("memory", used.memory, slot.total.memory),
            ):
                if have > total * (1 + EPS) + EPS:
                    problems.append(f"{slot.name}: {have:g} {what} allocated of {total:g}")
            if used.gpu > slot.total.gpu:
                problems.append(f"{slot.name}: {used.gpu} GPUs allocated of {slot.total.gpu}")
            for job in slot.allocations:
                if job in seen:
                    problems.append(f"job {job} is allocated twice")
                seen.add(job)
        queued = {node.job_id for request in self.queue for node in request.nodes}
        problems += [f"job {job} is both queued and allocated" for job in sorted(queued & seen)]
        return problems

    # --- changing ------------------------------------------------------------------------------------------

    def enqueue(self, request: PlacementRequest, index: QueueIndex | None = None) -> SchedulerState:
        """The request, queued with the next submission number; the same request id again changes nothing.
        `index`: the step's, if it keeps one."""
        index = (index or QueueIndex()).of(self.queue)
        if self.knows(request, index):
            return self
        jobs = [node.job_id for node in request.nodes]
        clash = sorted(job for job in jobs if job in index.jobs or self.job_instance(job) is not None)
        if clash:
            raise ValueError(f"job {clash[0]} is already queued or placed by another request")
        queued = request.model_copy(update={"seq": self.next_seq})
        state = self.model_copy(update={"queue": [*self.queue, queued], "next_seq": self.next_seq + 1})
        index.added(queued, state.queue)
        return state

    def schedule(self) -> tuple[SchedulerState, list[Grant]]:
        """Grant every waiting gang that fits now, in priority order, without passing a blocked one."""
        if not self.queue:
            return self, []
        instances = dict(self.instances)
        rooms = {slot.name: Room.of(slot) for slot in self._slots() if slot.status == InstanceStatus.READY}
        blocked: set[str] = set()
        granted: list[PlacementRequest] = []
        added: dict[str, dict[str, Allocation]] = {}  # instance -> the step's new allocations there
        slots = self._slots()
        # A burst queues many requests alike: one that found no room decides for the others (the same
        # rooms, the same usable instances); each step of the fleet costs its head, not its whole queue
        # (docs/fleets.md#scheduling).
        failed: set[tuple[str, ...]] = set()
        for request in self.waiting():
            if blocked >= rooms.keys():  # every ready instance is held for a request before: none is left
                break
            usable = [s for s in slots if s.name in rooms and s.name not in blocked and _serves(request, s)]
            if not usable:  # what it could block is blocked already
                continue
            if (alike := (_shape(request), *(s.name for s in usable))) in failed:
                continue
            assignment = place(request, usable, rooms)
            if assignment is None:
                failed.add(alike)
                if self.never_fits(request) is None:  # one that never fits holds nothing up
                    blocked |= self._eligible(request)
                continue
            failed.clear()  # the rooms changed
            for node, name, blocks, reserved in assignment:
                rooms[name] = rooms[name].take(blocks, reserved)
                allocation = Allocation(
                    request_id=request.request_id, node=node, resources=reserved, blocks=blocks
                )
                added.setdefault(name, {})[request.nodes[node].job_id] = allocation
            granted.append(request)
        for name, allocations in added.items():  # each instance copied once, however many it took
            instances[name] = instances[name].with_allocations(allocations)
        ids = {request.request_id for request in granted}
        queue = [request for request in self.queue if request.request_id not in ids]
        state = self.model_copy(update={"instances": instances, "queue": queue})
        grants = [
            state.grant(request.request_id, [node.job_id for node in request.nodes]) for request in granted
        ]
        return state, [grant for grant in grants if grant is not None]

    def release(self, job_id: str) -> SchedulerState:
        """The job's capacity back; a deleted instance goes with its last job. Unknown jobs change nothing."""
        name = self.job_instance(job_id)
        if name is None:
            return self
        slot = self.instances[name].without(job_id)
        instances = dict(self.instances)
        if not slot.allocations and slot.status == InstanceStatus.DELETED:
            del instances[name]
        else:
            instances[name] = slot
        return self.model_copy(update={"instances": instances})

    def cancel(self, request_id: str) -> SchedulerState:
        """The request out of the queue, and whatever it was granted released."""
        state = self.model_copy(update={"queue": [r for r in self.queue if r.request_id != request_id]})
        grant = state.grant(request_id)
        for placement in grant.placements if grant else []:
            state = state.release(placement.job_id)
        return state

    def set_priority(self, request_id: str, priority: int) -> SchedulerState:
        """A waiting request's new priority (0-100); its submission order is kept. Others: no change."""
        if not 0 <= priority <= 100:
            raise ValueError(f"priority {priority} is not within 0..100")
        queue = [
            r.model_copy(update={"priority": priority}) if r.request_id == request_id else r
            for r in self.queue
        ]
        return self.model_copy(update={"queue": queue})

    def add_instance(self, slot: InstanceSlot) -> SchedulerState:
        """A new instance, or a known one as its agent describes it now: its jobs keep what they were given
        (what is free is the new total less what they hold: nothing, while they hold more than it)."""
        known = self.instances.get(slot.name)
        allocations = known.allocations if known is not None else {}
        if slot.allocations and slot.allocations != allocations:
            raise ValueError("a slot is added without allocations: they come from grants")
        updated = slot.model_copy(update={"allocations": allocations})
        return self.model_copy(update={"instances": {**self.instances, slot.name: updated}})

    def remove_instance(self, name: str) -> SchedulerState:
        """Gone at once when idle; otherwise deleted (no new grants) until its last job is released."""
        slot = self.instances.get(name)
        if slot is None:
            return self
        instances = dict(self.instances)
        if slot.allocations:
            instances[name] = slot.model_copy(update={"status": InstanceStatus.DELETED})
        else:
            del instances[name]
        return self.model_copy(update={"instances": instances})

    def mark_unreachable(self, name: str) -> tuple[SchedulerState, list[str]]:
        """No new grants on the instance; returns the jobs placed there, for the caller to fail."""
        slot = self.instances.get(name)
        if slot is None:
            return self, []
        state = (
            self._with_status(slot, InstanceStatus.UNREACHABLE)
            if slot.status == InstanceStatus.READY
            else self
        )
        return state, sorted(slot.allocations)

    def mark_ready(self, name: str) -> SchedulerState:
        """An unreachable instance back in service (a deleted one stays deleted)."""
        slot = self.instances.get(name)
        if slot is None or slot.status != InstanceStatus.UNREACHABLE:
            return self
        return self._with_status(slot, InstanceStatus.READY)

    # --- helpers -------------------------------------------------------------------------------------------

    def _slots(self) -> list[InstanceSlot]:
        return [self.instances[name] for name in sorted(self.instances)]

    def _candidates(self, request: PlacementRequest) -> list[InstanceSlot]:
        return [slot for slot in self._slots() if _serves(request, slot)]

    def _eligible(self, request: PlacementRequest) -> set[str]:
        """The instances some node of the request could use when empty, whatever their status but deleted."""
        return {
            slot.name
            for slot in self._candidates(request)
            if slot.status != InstanceStatus.DELETED
            and any(isinstance(node_cost(slot, n), tuple) for n in request.nodes)
        }

    def _with_status(self, slot: InstanceSlot, status: InstanceStatus) -> SchedulerState:
        return self.model_copy(
            update={"instances": {**self.instances, slot.name: slot.model_copy(update={"status": status})}}
        )


def _serves(request: PlacementRequest, slot: InstanceSlot) -> bool:
    """The instance is one of the request's fleets'."""
    return request.fleets is None or slot.fleet in request.fleets


def _shape(request: PlacementRequest) -> str:
    """A request but its names and its place in the queue: two alike fit, or do not, in the same places."""
    nodes = "".join(node.model_dump_json(exclude={"job_id"}) for node in request.nodes)
    return request.model_dump_json(exclude={"request_id", "priority", "seq", "nodes"}) + nodes
