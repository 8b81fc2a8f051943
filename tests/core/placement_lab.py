"""A fleet's scheduler with given instances, and where it places a request: what the placement
requirements' tests (CPU architecture, /dev/shm, privileged) ask of it."""

from __future__ import annotations

from core.fleets.placement import InstanceSlot
from core.fleets.scheduling import SchedulerState
from core.wire.job_messages import PlacementRequest


def lab(*slots: InstanceSlot) -> SchedulerState:
    state = SchedulerState()
    for one in slots:
        state = state.add_instance(one)
    return state


def placed_on(state: SchedulerState, request: PlacementRequest) -> list[str]:
    _, grants = state.enqueue(request).schedule()
    return [placement.instance for grant in grants for placement in grant.placements]
